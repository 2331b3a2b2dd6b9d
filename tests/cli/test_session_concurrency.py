"""Several real `chatapp ask --session` processes on one session, and rm/rename during a turn:
every turn is kept, or its process says it was not (exit 1, one line). Nothing is lost silently."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from chatapp import paths
from chatapp.engine.sessions.store import SessionStore

EXE = Path(sys.executable).with_name("chatapp")
QUICK = ("--temperature", "0", "--max-tokens", "8", "--ctx", "1024")
LONG = ("Write a very long story about a ship.", "--temperature", "0", "--max-tokens", "200", "--ctx", "1024",
        "--threads", "1")


@pytest.fixture
def start(isolated_dirs):
    """Start `chatapp ARGS...`; whatever is still running when the test ends is killed."""
    procs: list[subprocess.Popen] = []

    def run(*args: str) -> subprocess.Popen:
        proc = subprocess.Popen([str(EXE), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env={**os.environ, **isolated_dirs, "COLUMNS": "200"})
        procs.append(proc)
        return proc

    yield run
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def paused_mid_turn(start, *args: str) -> subprocess.Popen:
    """An `ask` stopped (SIGSTOP) while it streams its reply: whatever runs before it is sent
    SIGCONT happens during its turn, however fast or busy the machine is."""
    proc = start(*args)
    proc.stdout.read(20)
    proc.send_signal(signal.SIGSTOP)
    return proc


def finish(proc: subprocess.Popen) -> tuple[str, str]:
    proc.send_signal(signal.SIGCONT)
    return proc.communicate(timeout=600)


def stored(name: str):
    return SessionStore.open(paths.sessions_dir(), create=False).load(name)


def refusal(err: str) -> str:
    assert "Traceback" not in err, err
    return err.strip().splitlines()[-1]


def test_processes_by_rounds_keep_every_turn_or_say_so(start):
    writers, rounds = 4, 5  # the case: 20 turns, four at a time
    kept: dict[str, str] = {}
    refused: list[str] = []
    for r in range(rounds):
        procs = {f"Round {r} writer {w}: name a fruit.": None for w in range(writers)}
        for prompt in procs:
            procs[prompt] = start("ask", "--session", "same", prompt, "--json", *QUICK)
        for prompt, proc in procs.items():
            out, err = proc.communicate(timeout=300)
            if proc.returncode == 0:
                [record] = [json.loads(line) for line in out.splitlines()]
                kept[prompt] = record["reply"]
            else:
                assert proc.returncode == 1, err
                assert refusal(err).startswith("chatapp: Session: session changed by another process: 'same'")
                assert out == ""  # --json prints a turn only once it is saved
                refused.append(prompt)
    messages = stored("same").messages
    users = [i for i, m in enumerate(messages) if m.role == "user"]
    assert sorted(messages[i].content for i in users) == sorted(kept), "every kept turn stored once, no other"
    for i in users:
        assert messages[i + 1].role == "assistant" and messages[i + 1].content == kept[messages[i].content]
    assert len(kept) + len(refused) == writers * rounds and len(kept) >= rounds


def test_a_cli_turn_on_a_session_changed_meanwhile_is_refused_not_overwriting(start):
    first = start("ask", "--session", "s", "Say hello.", *QUICK)
    assert first.wait(timeout=300) == 0
    slow = paused_mid_turn(start, "ask", "--session", "s", *LONG)
    quick = start("ask", "--session", "s", "Name a colour.", *QUICK)
    assert quick.wait(timeout=300) == 0
    out, err = finish(slow)
    assert slow.returncode == 1
    assert refusal(err).startswith("chatapp: Session: session changed by another process")
    assert [m.content for m in stored("s").messages if m.role == "user"] == ["Say hello.", "Name a colour."]


def test_rm_during_a_turn_is_final_and_leaves_no_state_file(start):
    assert start("ask", "--session", "s", "Say hello.", *QUICK).wait(timeout=300) == 0
    slow = paused_mid_turn(start, "ask", "--session", "s", *LONG)
    rm = start("sessions", "rm", "s")
    assert rm.wait(timeout=60) == 0, rm.stderr.read()
    out, err = finish(slow)
    assert slow.returncode == 1
    assert refusal(err) == ("chatapp: Session: session 's' was removed by another process; "
                            "this run's new turns were not saved")
    assert stored("s") is None
    assert not [p for p in (paths.sessions_dir() / "states").iterdir() if not p.name.startswith(".")]


def test_rename_during_a_turn_is_followed_and_leaves_one_session(start):
    assert start("ask", "--session", "s", "Say hello.", *QUICK).wait(timeout=300) == 0
    slow = paused_mid_turn(start, "ask", "--session", "s", *LONG)
    rename = start("sessions", "rename", "s", "t")
    assert rename.wait(timeout=60) == 0, rename.stderr.read()
    out, err = finish(slow)
    assert slow.returncode == 0, err
    assert "session 's' was renamed to 't' by another process; saved under the new name" in err
    summaries = SessionStore.open(paths.sessions_dir(), create=False).summaries()
    assert [s.name for s in summaries] == ["t"]
    assert [m.content for m in stored("t").messages if m.role == "user"] == ["Say hello.", LONG[0]]
