"""`ask --session` and `chatapp sessions ...` end to end."""

from __future__ import annotations

import errno
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

import chatapp.commands.core  # noqa: F401 - registers ask on the app the in-process runner uses
from chatapp import paths
from chatapp.engine.sessions.schema import SCHEMA_VERSION
from chatapp.engine.sessions.store import SessionStore
from tests.cli.conftest import records
from tests.cli.seeded_sessions import seed

ASK = ("--json", "--temperature", "0", "--max-tokens", "24", "--ctx", "1024")
P1, P2 = "Name a colour.", "Name another one."


@pytest.fixture(autouse=True)
def wide_terminal(monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")


def test_two_processes_answer_exactly_as_one(chatapp_exe):
    [first] = records(chatapp_exe("ask", "--session", "s", P1, *ASK))
    resumed = chatapp_exe("ask", "--session", "s", P2, *ASK)
    [second] = records(resumed)
    one_process = records(chatapp_exe("ask", P1, P2, *ASK))
    assert [first["reply"], second["reply"]] == [r["reply"] for r in one_process]
    assert first["session"] == second["session"] == "s"
    assert first["restored_tokens"] == 0
    assert second["restored_tokens"] > 0 and second["restore_ms"] > 0
    assert second["prefill_tokens"] == second["prompt_tokens"] - second["restored_tokens"]
    assert second["prefill_tokens"] == one_process[1]["prefill_tokens"]
    notice = f"session s: restored {second['restored_tokens']:,} tokens in "
    assert notice in resumed.stderr and "re-prefill would take ~" in resumed.stderr
    assert "restored" not in resumed.stdout.replace('"restored_tokens"', "")


def test_a_damaged_state_is_reported_and_the_turn_still_answers(chatapp_exe):
    records(chatapp_exe("ask", "--session", "s", P1, *ASK))
    [state] = (paths.sessions_dir() / "states").iterdir()
    state.write_bytes(state.read_bytes()[:1000])
    out = chatapp_exe("ask", "--session", "s", P2, *ASK)
    [second] = records(out)
    assert "saved KV state not used (the state file is truncated (1,000 of " in out.stderr
    assert second["restored_tokens"] == 0 and second["cached_tokens"] == 0
    assert second["state_fallback"].startswith("the state file is truncated")
    assert [r["reply"] for r in records(chatapp_exe("ask", P1, P2, *ASK))][1] == second["reply"]


def test_ctrl_c_saves_the_partial_reply(isolated_dirs):
    exe = Path(sys.executable).with_name("chatapp")
    proc = subprocess.Popen([str(exe), "ask", "--session", "story", "Write a very long story about a ship.",
                             "--temperature", "0", "--max-tokens", "2000", "--ctx", "4096"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env={**os.environ, **isolated_dirs})
    proc.stdout.read(20)
    time.sleep(0.3)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err.decode()  # kept all the same
    session = SessionStore.open(paths.sessions_dir(), create=False).get("story")
    assert session.messages[-1].role == "assistant" and session.messages[-1].stopped
    assert session.messages[-1].content
    [(_, record)] = SessionStore(paths.sessions_dir()).turn_records("story")
    assert record["finish_reason"] == "stopped"


def test_a_state_that_cannot_be_written_still_saves_the_transcript(invoke, monkeypatch):
    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr("chatapp.engine.sessions.manager.atomic_write", full)
    result = invoke("ask", "--session", "full", "Hi", "--max-tokens", "4", "--ctx", "512")
    assert result.exit_code == 0, result.output
    assert "KV state not saved (No space left on device); the transcript is saved" in result.stderr
    assert [m.role for m in SessionStore(paths.sessions_dir()).get("full").messages] == ["system", "user",
                                                                                        "assistant"]


# --- the sessions commands, on a seeded database (no model needed) -----------------------

def test_list(invoke):
    seed()
    result = invoke("sessions", "list")
    assert result.exit_code == 0, result.output
    work = next(line for line in result.stdout.splitlines() if line.split()[1:2] == ["work"])  # after its number
    assert "smollm2-135m-instruct (Q4_1)" in work and " 2 " in work and " 65 " in work and "none" in work
    assert "empty one" in result.stdout


def test_list_with_no_sessions_writes_nothing(invoke):
    result = invoke("sessions", "list")
    assert result.exit_code == 0 and "No saved sessions yet" in result.stdout
    assert not paths.sessions_dir().exists()


def test_show(invoke):
    seed()
    result = invoke("sessions", "show", "work")
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "Hi [bold]there[/]" in out and "Hello!" in out and "(stopped)" in out
    turns = [line.split() for line in out.splitlines() if line.strip()[:1].isdigit()]
    assert turns[0][:5] == ["1", "30", "0", "30", "0"] and turns[1][:5] == ["2", "60", "10", "50", "10"]
    assert "1,234" in out and "88.8" in out


def test_show_reads_at_80_columns(isolated_dirs):
    """The turns table fits 80 columns with every header whole (it came out "prom… cach… pref…")."""
    seed()
    exe = Path(sys.executable).with_name("chatapp")
    out = subprocess.run([str(exe), "sessions", "show", "work"], capture_output=True, text=True, timeout=120,
                         env={**os.environ, **isolated_dirs, "COLUMNS": "80"})
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    table = lines[next(i for i, line in enumerate(lines) if line.startswith("Turns")):]
    assert all(len(line) <= 80 for line in table) and "…" not in "".join(table)
    words = " ".join(table).split()
    for header in ("turn", "prompt", "cached", "prefilled", "restored", "prefill", "tok/s", "TTFT", "ms",
                   "decode", "finish"):
        assert header in words, (header, table)
    turns = [line.split() for line in table if line.strip()[:1].isdigit()]
    assert turns[0][:5] == ["1", "30", "0", "30", "0"] and turns[1][:5] == ["2", "60", "10", "50", "10"]


def test_export_markdown_and_json(invoke):
    seed()
    md = invoke("sessions", "export", "work")
    assert md.exit_code == 0, md.output
    assert md.stdout.startswith("# Session work") and "### assistant (stopped)" in md.stdout
    row = next(line for line in md.stdout.splitlines() if line.startswith("| 2 |"))
    assert "| 17% |" in row and "| 1,234 |" in row and "| Q4_1 | f16 | CPU |" in row
    data = json.loads(invoke("sessions", "export", "work", "--format", "json").stdout)
    assert data["format"] == "chatapp-session" and data["name"] == "work"
    assert [m["role"] for m in data["messages"]] == ["system", "user", "assistant", "user", "assistant"]
    assert data["journal"][1]["cache_reuse"] == pytest.approx(10 / 60, abs=1e-4)
    assert {"prefill_tps", "decode_tps", "ttft_ms", "quant", "kv_type", "backend"} <= set(data["journal"][0])


def test_rename_and_rm(invoke):
    seed()
    assert invoke("sessions", "rename", "work", "play").exit_code == 0
    listing = invoke("sessions", "list").stdout
    assert "play" in listing and "work" not in listing
    assert invoke("sessions", "rm", "play").exit_code == 0
    assert "play" not in invoke("sessions", "list").stdout


@pytest.mark.parametrize(("args", "needle"), [
    (("sessions", "show", "nope"), "no session named 'nope'"),
    (("sessions", "rm", "nope"), "no session named 'nope'"),
    (("sessions", "export", "nope"), "no session named 'nope'"),
    (("sessions", "rename", "nope", "x"), "no session named 'nope'"),
    (("sessions", "rename", "work", "empty one"), "already exists"),
    (("sessions", "rename", "work", "a/b"), "no path separators"),
    (("sessions", "show", "../../etc/passwd"), "no path separators"),
    (("sessions", "rm", ".."), "invalid session name"),
    (("sessions", "export", "work", "--format", "pdf"), "pdf"),
    (("ask", "--session", "../escape", "hi"), "no path separators"),
    (("ask", "--session", "", "hi"), "session name is empty"),
])
def test_bad_input_is_one_line_exit_2(chatapp_exe, args, needle):
    seed()
    out = chatapp_exe(*args)
    assert out.returncode == 2, out.stdout + out.stderr
    assert needle in out.stderr and "Traceback" not in out.stderr


def test_a_database_from_a_newer_chatapp(chatapp_exe):
    store = seed()
    conn = sqlite3.connect(store.path)
    conn.execute("PRAGMA user_version = 42")
    conn.close()
    for args in (("sessions", "list"), ("sessions", "show", "work"), ("ask", "--session", "work", "hi")):
        out = chatapp_exe(*args)
        assert out.returncode == 2
        assert out.stderr.strip() == \
            f"chatapp: Session: session database is from a newer chatapp (schema 42 > {SCHEMA_VERSION})"


def test_an_unwritable_data_dir(chatapp_exe, isolated_dirs):
    Path(isolated_dirs["XDG_DATA_HOME"]).parent.mkdir(parents=True, exist_ok=True)
    Path(isolated_dirs["XDG_DATA_HOME"]).write_text("a file where the data folder should be")
    out = chatapp_exe("ask", "--session", "s", "hi")
    assert out.returncode == 2
    assert "cannot create the sessions folder" in out.stderr and "Traceback" not in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1
