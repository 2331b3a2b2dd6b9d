"""`sessions list` shows each session's first question, newest first, as a table at 80 columns
and as JSON; a chat's session name comes from its first question (chatapp.engine.sessions.names)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from chatapp.engine.sessions.names import TITLE_LEN, find_name, name_from
from chatapp.errors import SessionError


@pytest.mark.parametrize("question, name", [
    ("Name a colour.", "Name a colour"),
    ("What is a KV cache? Answer in two sentences.", "What is a KV cache"),
    ("Dr. Smith said hi", "Dr. Smith said hi"),
    ("What's 2+2?", "Whats 2+2"),
    ("\n\n  Second line first", "Second line first"),
    ("???", "chat"),
    ("_hidden", "hidden"),
    ("Écris un poème", "Écris un poème"),
    ("Explain the KV cache in llama.cpp with examples and details please", "Explain the KV cache in llama.cpp with"),
])
def test_a_chat_is_named_after_its_first_question(question, name):
    assert name_from(question, lambda taken: False) == name
    assert len(name_from("word " * 100, lambda taken: False)) <= TITLE_LEN


def test_a_taken_name_gets_a_number_and_every_name_is_valid():
    taken = {"Name a colour", "Name a colour 2"}
    assert name_from("Name a colour.", taken.__contains__) == "Name a colour 3"
    with pytest.raises(SessionError):  # name_from never returns what validate_name refuses
        name_from("x", lambda taken: (_ for _ in ()).throw(SessionError("database gone")))


def test_sessions_list_shows_each_first_question_newest_first(chatapp_exe, isolated_dirs):
    for name, question in (("older", "Name a colour.\nand more"), ("newer", "Name a fruit.")):
        done = chatapp_exe("ask", "--session", name, "-n", "2", "--threads", "2", question)
        assert done.returncode == 0, done.stderr
    listed = json.loads(chatapp_exe("sessions", "list", "--json").stdout)
    assert [(s["name"], s["first_line"]) for s in listed["sessions"]] == [
        ("newer", "Name a fruit."), ("older", "Name a colour.")]
    exe = Path(sys.executable).with_name("chatapp")
    table = subprocess.run([str(exe), "sessions", "list"], capture_output=True, text=True, timeout=120,
                           env={**os.environ, **isolated_dirs, "COLUMNS": "80"}).stdout
    lines = table.splitlines()
    assert all(len(line) <= 80 for line in lines)
    newer = next(i for i, line in enumerate(lines) if "Name a fru" in line)  # cut with … at 80 columns
    older = next(i for i, line in enumerate(lines) if "Name a col" in line)
    assert newer < older
    heading = next(line for line in lines if line.lstrip().startswith("#"))
    assert heading.split()[:3] == ["#", "name", "question"] and "…" not in heading  # whole words at 80 columns
    assert re.search(r"\b\d\d-\d\d \d\d:\d\d$", lines[newer].rstrip())  # when, to the minute
    assert lines[newer].split()[0] == "1" and lines[older].split()[0] == "2"  # the number other commands take
    # by that number, or a unique beginning of the name, case aside, as the list shows them
    for given, meant in (("2", "older"), ("NEW", "newer"), ("o", "older")):
        shown = chatapp_exe("sessions", "tree", given, "--json")
        assert shown.returncode == 0, shown.stderr
        assert json.loads(shown.stdout)[0]["content"] == ("Name a fruit." if meant == "newer" else
                                                         "Name a colour.\nand more"), given
    missing = chatapp_exe("sessions", "show", "9")
    assert missing.returncode == 2 and "no session named '9'" in missing.stderr, missing.stderr


def test_a_session_is_found_by_name_number_or_unique_prefix():
    names = ["trip 2", "trip", "Tokens", "9"]
    assert find_name("trip", names) == "trip"  # an exact name first, though it begins another
    assert find_name("9", names) == "9" and find_name("3", names) == "Tokens"  # a name, then a number
    assert find_name("tok", names) == "Tokens" and find_name("nothing", names) == "nothing"
    with pytest.raises(SessionError, match=r"'tr' begins 2 session names \('trip 2', 'trip'\)"):
        find_name("tr", names)
