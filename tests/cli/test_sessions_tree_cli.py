"""The tree on the command line, through the real chatapp: ask --branch-from, sessions tree and
checkout, export --all-branches, each turn's message ids, and bad input as one line."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from chatapp.engine.sessions.schema import SCHEMA_VERSION
from tests.cli.conftest import records

ASK = ("ask", "--temperature", "0", "--threads", "2", "--max-tokens", "12", "--session", "t", "--json")


def tree(chatapp_exe) -> list[dict]:
    out = chatapp_exe("sessions", "tree", "t", "--json")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


HOME = {"XDG_CONFIG_HOME": "config", "XDG_DATA_HOME": "data", "XDG_CACHE_HOME": "cache"}


@pytest.fixture(scope="module")
def branched_home(tmp_path_factory, default_model_path):
    """Two turns, then a branch after the first reply, made once for the module in a home of its
    own (a dozen tests start from it; two asks each took a minute of the suite): (home, first
    turn's record, branch record)."""
    home = tmp_path_factory.mktemp("branched")
    env = {**os.environ, "CHATAPP_MODEL": str(default_model_path), "COLUMNS": "200",
           **{var: str(home / folder) for var, folder in HOME.items()}}
    exe = Path(sys.executable).with_name("chatapp")

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(exe), *args], capture_output=True, text=True, env=env, timeout=300, check=False)

    first, _ = records(run(*ASK, "Name a fruit.", "Name a colour."))
    branched = run(*ASK, "--branch-from", first["message_id"], "Name a planet.")
    [branch] = records(branched)
    return home, first, branch, branched.stderr


@pytest.fixture
def branched(branched_home, isolated_dirs):
    """The module's branched session copied into this test's home: (first turn's record, branch
    record). Session states are found by the session's folder, so a copy resumes as the original."""
    home, first, branch, _ = branched_home
    for var, folder in HOME.items():
        if (home / folder).exists():
            shutil.copytree(home / folder, isolated_dirs[var], dirs_exist_ok=True)
    return first, branch


def test_a_branch_claims_only_the_reuse_it_gets(branched_home):
    """Resumed to branch after the first reply, the notice said "re-prefill would take ~3.4 s" of
    all the restored tokens while the branch reused only those before its branch point."""
    _, first, branch, stderr = branched_home
    restored = next(line for line in stderr.splitlines() if "restored" in line)
    assert "re-prefill would take" not in restored and "reuses only those before its branch point" in restored
    assert 0 < branch["cached_tokens"] < int(restored.split("restored ")[1].split()[0].replace(",", ""))


def test_turn_records_name_their_messages_and_a_branch_grows_beside_the_old_path(chatapp_exe, branched):
    first, branch = branched
    rows = tree(chatapp_exe)
    by_id = {row["id"]: row for row in rows}
    assert set(rows[0]) == {"id", "parent", "role", "content", "active", "children"}
    assert rows[0]["parent"] is None and rows[0]["role"] == "user"
    assert by_id[first["message_id"]]["parent"] == first["parent_id"] == rows[0]["id"]
    questions = by_id[first["message_id"]]["children"]
    assert len(questions) == 2 and branch["parent_id"] == questions[1]
    assert [by_id[q]["content"] for q in questions] == ["Name a colour.", "Name a planet."]
    active = [row["content"] for row in rows if row["active"]]
    assert active[:2] == ["Name a fruit.", first["reply"]] and active[2] == "Name a planet."
    assert branch["action"] == "branch" and branch["branch"] == "2/2"
    drawn = chatapp_exe("sessions", "tree", "t")
    assert drawn.returncode == 0 and first["message_id"] in drawn.stdout and "(2 branches)" in drawn.stdout


def test_checkout_makes_an_old_path_active_and_the_next_ask_continues_there(chatapp_exe, branched):
    rows = tree(chatapp_exe)
    old_leaf = next(row for row in rows if row["content"] == "Name a colour.")["children"][0]
    out = chatapp_exe("sessions", "checkout", "t", old_leaf[:6])
    assert out.returncode == 0, out.stderr
    assert [row["id"] for row in tree(chatapp_exe) if row["active"]][-1] == old_leaf
    [after] = records(chatapp_exe(*ASK, "And a shape?"))
    assert after["parent_id"] != old_leaf  # the parent is the new question, whose parent is the old leaf
    rows = {row["id"]: row for row in tree(chatapp_exe)}
    assert rows[after["parent_id"]]["parent"] == old_leaf
    assert after["restored_tokens"] > 0  # the old leaf's own state file was restored on resume


def test_a_branch_from_a_kept_leaf_in_a_new_process_starts_from_that_leafs_own_state(chatapp_exe, branched):
    """Not from the active leaf's (another branch): the leaf's path is restored whole, and only
    the new question is prefilled, as after a checkout of it."""
    rows = tree(chatapp_exe)
    old_leaf = next(row for row in rows if row["content"] == "Name a colour.")["children"][0]
    [after] = records(chatapp_exe(*ASK, "--branch-from", old_leaf, "And a shape?"))
    assert after["restored_tokens"] > 0 and after["cached_tokens"] > after["restored_tokens"] // 2
    assert after["prefill_tokens"] < 20, after  # today: the old leaf's question and reply again too


def test_checkout_of_a_question_is_refused_as_a_branch_from_it_is(chatapp_exe, branched):
    """The next ask would put a second question after it: a path ends at a reply."""
    before = tree(chatapp_exe)
    question = next(row for row in before if row["content"] == "Name a colour.")
    out = chatapp_exe("sessions", "checkout", "t", question["id"])
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert "is a user message: the active path ends at a reply" in out.stderr
    assert question["children"][0] in out.stderr and question["parent"] in out.stderr  # what to check out instead
    assert tree(chatapp_exe) == before


def test_export_has_the_active_path_by_default_and_every_branch_on_request(chatapp_exe, branched, tmp_path):
    out = chatapp_exe("sessions", "export", "t", "--format", "json")
    data = json.loads(out.stdout)
    assert [m["content"] for m in data["messages"][1:]][2] == "Name a planet."
    assert data["messages_in_other_branches"] == 2 and "tree" not in data
    out = chatapp_exe("sessions", "export", "t", "--format", "json", "--all-branches")
    data = json.loads(out.stdout)
    by_id = {node["id"]: node for node in data["tree"]}  # flat, each naming its parent and children
    [root] = [node for node in data["tree"] if node["parent"] is None]
    [reply] = [by_id[i] for i in root["children"]]
    assert reply["parent"] == root["id"] and (root["depth"], reply["depth"]) == (0, 1)
    assert [by_id[q]["content"] for q in reply["children"]] == ["Name a colour.", "Name a planet."]
    assert len(data["branches"]) == 2 and len(data["journal"]) == 3
    md = chatapp_exe("sessions", "export", "t", "--all-branches").stdout
    assert "## Branch 1" in md and "## Branch 2 (active)" in md


@pytest.mark.parametrize("args, needle", [
    (("ask", "--branch-from", "abcd1234", "hi"), "--branch-from needs --session"),
    (("sessions", "checkout", "t", "ffffffff"), "no message with id 'ffffffff'"),
    (("sessions", "checkout", "t", "ab"), "too short"),
    (("sessions", "checkout", "nope", "abcd"), "no session named 'nope'"),
    (("sessions", "tree", "nope"), "no session named 'nope'"),
])
def test_bad_tree_input_is_one_line_exit_2(chatapp_exe, branched, args, needle):
    before = tree(chatapp_exe)
    out = chatapp_exe(*args)
    assert out.returncode == 2 and needle in out.stderr and len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert tree(chatapp_exe) == before  # nothing changed


def test_branching_from_a_question_or_an_unknown_id_changes_nothing(chatapp_exe, branched):
    before = tree(chatapp_exe)
    for bad, needle in ((before[0]["id"], "a branch starts after a reply"), ("99999999", "no message with id")):
        out = chatapp_exe(*ASK, "--branch-from", bad, "Hello?")
        assert out.returncode == 2 and needle in out.stderr and "Traceback" not in out.stderr, out.stderr
        assert tree(chatapp_exe) == before


def test_a_bad_message_id_is_refused_before_the_model_loads(chatapp_exe, branched, tmp_path):
    """--branch-from and --edit are checked against the saved tree first: with a model that cannot
    load, the line is about the id, so no model was loaded and no cache restored for nothing."""
    before = tree(chatapp_exe)
    reply = next(row for row in before if row["role"] == "assistant")
    no_model = str(tmp_path / "missing.gguf")
    for flag, bad, needle in (("--branch-from", "zzzzzzzz", "no message with id 'zzzzzzzz'"),
                              ("--branch-from", before[0]["id"], "a branch starts after a reply"),
                              ("--edit", reply["id"], "only a question or a tool's result can be edited")):
        out = chatapp_exe(*ASK, "--model", no_model, flag, bad, "Hello?")
        assert out.returncode == 2 and needle in out.stderr and len(out.stderr.strip().splitlines()) == 1, out.stderr
        assert tree(chatapp_exe) == before
    out = chatapp_exe(*ASK, "--model", no_model, "--branch-from", reply["id"], "Hello?")  # a good id: the model
    assert out.returncode != 0 and "missing.gguf" in out.stderr, out.stderr


def test_a_tree_from_a_newer_chatapp_is_refused_in_one_line(chatapp_exe, branched, isolated_dirs):
    db = Path(isolated_dirs["XDG_DATA_HOME"]) / "chatapp" / "sessions" / "sessions.db"
    with sqlite3.connect(db) as conn:
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    out = chatapp_exe("sessions", "tree", "t")
    assert out.returncode == 2 and "newer chatapp" in out.stderr and len(out.stderr.strip().splitlines()) == 1


def test_a_branch_from_a_token_keeps_the_reply_before_it_and_prefills_only_that_token(chatapp_exe):
    [first] = records(chatapp_exe(*ASK, "--logprobs", "5", "Name a fruit."))
    alternative = first["logprobs"][2]["top"][1]
    before = "".join(step["token"] for step in first["logprobs"][:2])
    [branch] = records(chatapp_exe(*ASK, "--branch-from", first["message_id"], "--at-token", "2",
                                   "--token", str(alternative["id"]), "-"))
    assert branch["reply"].startswith(before + alternative["token"]), (branch["reply"], before, alternative)
    assert branch["action"] == "regenerate" and branch["branch"] == "2/2"
    assert branch["forced_tokens"] == 3 and branch["forced_prefilled"] <= 1
    assert branch["prefill_tokens"] <= 1  # the reply's cache was kept: nothing before the chosen token again
    rows = {row["id"]: row for row in tree(chatapp_exe)}
    assert rows[branch["message_id"]]["parent"] == first["parent_id"]
    out = chatapp_exe(*ASK, "--branch-from", first["message_id"], "--at-token", "999", "--token", "1", "-")
    errors = [line for line in out.stderr.splitlines() if line.startswith("chatapp:")]
    assert out.returncode == 2 and len(errors) == 1 and "outside reply" in errors[0] and "Traceback" not in out.stderr
    out = chatapp_exe(*ASK, "--branch-from", first["message_id"], "--at-token", "1", "--token", "99999999", "-")
    assert out.returncode == 2 and "outside the vocabulary" in out.stderr
