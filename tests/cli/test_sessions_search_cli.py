"""`chatapp sessions search` through the real chatapp: a word on a branch not shown, with the
commands that open that branch; nothing of an incognito chat; a message's control characters
shown, not sent to the terminal; a query FTS5 can't read as one line; and the index still equal
to the messages after a kill -9 in the middle of a turn."""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli.conftest import records
from tests.engine.sessions.session_helpers import search_index_disagreements

ASK = ("ask", "--temperature", "0", "--threads", "1", "--max-tokens", "8", "--json")
HOME = {"XDG_CONFIG_HOME": "config", "XDG_DATA_HOME": "data", "XDG_CACHE_HOME": "cache"}
EVIL = "Where do \x1b]0;pwned\x07 axolotls live?"


@pytest.fixture(scope="module")
def searched_home(tmp_path_factory, default_model_path):
    """Made once for the module: session "harbour" with two turns, then a branch after the first
    reply (so the second question is on a branch not shown), and an incognito chat. (home, the
    record of the turn on the branch left)."""
    home = tmp_path_factory.mktemp("searched")
    env = {**os.environ, "CHATAPP_MODEL": str(default_model_path), "COLUMNS": "200",
           **{var: str(home / folder) for var, folder in HOME.items()}}
    exe = Path(sys.executable).with_name("chatapp")

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(exe), *args], capture_output=True, text=True, env=env, timeout=300, check=False)

    first, left = records(run(*ASK, "--session", "harbour", "Is the quokka a marsupial?",
                              "Name a colour like periwinkle."))
    records(run(*ASK, "--session", "harbour", "--branch-from", first["message_id"], EVIL))
    records(run(*ASK, "--incognito", "Tell me about the narwhal."))
    return home, left


@pytest.fixture
def home(searched_home, isolated_dirs) -> Path:
    """The module's sessions copied into this test's home; the database's path."""
    source, _ = searched_home
    for var, folder in HOME.items():
        if (source / folder).exists():
            shutil.copytree(source / folder, isolated_dirs[var], dirs_exist_ok=True)
    return Path(isolated_dirs["XDG_DATA_HOME"]) / "chatapp" / "sessions" / "sessions.db"


def test_a_word_on_a_branch_not_shown_names_the_commands_that_open_it(chatapp_exe, searched_home, home):
    _, left = searched_home
    out = chatapp_exe("sessions", "search", "periwinkle", "--json")
    assert out.returncode == 0, out.stderr
    hits = json.loads(out.stdout)["hits"]
    assert hits and {h["session"] for h in hits} == {"harbour"} and "user" in {h["role"] for h in hits}
    assert all(h["leaf"] == left["message_id"] and not h["on_active_path"] for h in hits), hits
    assert {h["field"] for h in hits if h["role"] == "user"} == {"text"}  # what of the message matched
    shown = chatapp_exe("sessions", "search", "periwinkle")
    opening = f"open: chatapp sessions checkout harbour {left['message_id']} && chatapp --session harbour"
    assert opening in shown.stdout, shown.stdout
    assert chatapp_exe("sessions", "checkout", "harbour", left["message_id"]).returncode == 0
    after = json.loads(chatapp_exe("sessions", "search", "periwinkle", "--json").stdout)["hits"]
    assert all(h["on_active_path"] for h in after)  # that branch is the one the session opens on now


def test_an_incognito_chat_is_found_nowhere(chatapp_exe, home):
    out = chatapp_exe("sessions", "search", "narwhal")
    assert out.returncode == 0 and out.stdout.startswith("No saved message matches narwhal"), out
    with sqlite3.connect(home) as conn:
        assert conn.execute("SELECT count(*) FROM messages WHERE content LIKE '%narwhal%'").fetchone() == (0,)
    assert search_index_disagreements(home) == []


def test_a_messages_control_characters_are_shown_not_sent(chatapp_exe, home):
    out = chatapp_exe("sessions", "search", "axolotls")
    assert out.returncode == 0, out.stderr
    assert "\x1b" not in out.stdout and "\x07" not in out.stdout
    assert "\\x1b]0;pwned\\x07 axolotls" in out.stdout, out.stdout
    assert json.loads(chatapp_exe("sessions", "search", "axolotls", "--json").stdout)["hits"][0]["snippet"] == EVIL


@pytest.mark.parametrize("query", ['"', "AND", "nowhere:quokka"])
def test_a_query_fts5_cannot_read_is_one_line(chatapp_exe, home, query):
    out = chatapp_exe("sessions", "search", query)
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.startswith("chatapp: Search: cannot search for ") and out.stderr.count("\n") == 1, out.stderr


def test_kill_9_in_the_middle_of_a_turn_leaves_the_index_equal_to_the_messages(chatapp_exe, home, isolated_dirs):
    proc = subprocess.Popen([str(Path(sys.executable).with_name("chatapp")), "ask", "--session", "harbour",
                             "--temperature", "0", "--threads", "1", "--max-tokens", "2000",
                             "Write a very long story about a quokka on a ship."],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env={**os.environ, **isolated_dirs})
    try:
        assert proc.stdout.read(20)  # the reply is streaming: the turn is under way
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=60)
    assert search_index_disagreements(home) == []
    out = chatapp_exe("sessions", "search", "quokka", "--json")
    assert out.returncode == 0 and json.loads(out.stdout)["hits"], out.stderr
