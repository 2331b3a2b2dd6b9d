"""kill -9 while saving, and two processes saving one session at once, with real subprocesses."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from chatapp.engine.sessions import SessionManager
from chatapp.engine.sessions.files import TEMP_SUFFIX
from chatapp.engine.sessions.statefile import read_state

from .session_helpers import SETTINGS, open_engine, synthetic_history

SAVER = Path(__file__).with_name("session_saver.py")


def start_saver(directory: Path, name: str, tag: str, pairs: int, times: int, slow_ms: int = 0,
                branches: bool = False, grow: bool = False, extras: bool = False) -> subprocess.Popen:
    args = [str(directory), name, tag, str(pairs), str(times)]
    args += [str(slow_ms)] if slow_ms or branches or extras else []
    args += ["branches"] if branches else ["grow"] if grow else ["extras"] if extras else []
    return subprocess.Popen([sys.executable, str(SAVER), *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=os.environ.copy())


def wait_for_line(proc: subprocess.Popen, prefix: str, timeout: float = 120) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            pytest.fail(f"saver exited early: {proc.wait()} {proc.stderr.read()}")
        if line.startswith(prefix):
            return line
    pytest.fail(f"no {prefix!r} within {timeout} s")


def integrity(directory: Path) -> str:
    conn = sqlite3.connect(directory / "sessions.db")
    try:
        return conn.execute("PRAGMA integrity_check").fetchone()[0]
    finally:
        conn.close()


@pytest.fixture
def engine(default_model_path):
    engine = open_engine(default_model_path)
    yield engine
    engine.close()


def test_kill_9_while_saving_leaves_the_previous_state_loadable(tmp_path, engine):
    directory = tmp_path / "sessions"
    left_temp = []
    for delay_ms in (5, 30, 60):
        # The saver writes its ~7 MB state in 256 KiB pieces 2 ms apart, so these kills land
        # inside the state write (or just around it), timed from the write's start: however
        # slowly a loaded machine gets from "begin" to the write, the first one lands inside.
        proc = start_saver(directory, "s", "kill", 12, 0, slow_ms=2)
        try:
            wait_for_line(proc, "saved 1")
            wait_for_line(proc, "begin 3")
            wait_for_line(proc, "writing")
            time.sleep(delay_ms / 1000)
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            proc.stdout.close()
            proc.stderr.close()
        states = directory / "states"
        left_temp += [p.name for p in states.iterdir() if p.name.endswith(TEMP_SUFFIX)]
        assert integrity(directory) == "ok"
        manager = SessionManager.open(SETTINGS, directory)  # cleans the dead writer's temp file
        assert not [p for p in states.iterdir() if p.name.endswith(TEMP_SUFFIX)]
        state = read_state(manager.active_state_path(manager.store.get("s")))
        assert state.n_valid == len(state.tokens) > 200
        assert manager.store.get("s").messages == synthetic_history("kill", 12)
    live = manager.resume("s", engine)
    assert live.report.restored and live.report.restored_tokens == state.n_valid
    assert left_temp, "no kill landed inside a state write"


def test_two_processes_saving_one_session_do_not_corrupt_it_or_overwrite_each_other(tmp_path, engine):
    directory = tmp_path / "sessions"
    procs = [start_saver(directory, "shared", tag, pairs, 8) for tag, pairs in (("alpha", 6), ("beta", 9))]
    outputs = {}
    for tag, proc in zip(("alpha", "beta"), procs):
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err
        outputs[tag] = out
    assert integrity(directory) == "ok"
    manager = SessionManager.open(SETTINGS, directory)
    messages = manager.store.get("shared").messages
    winner = "alpha" if messages == synthetic_history("alpha", 6) else "beta"
    assert messages == synthetic_history(winner, 6 if winner == "alpha" else 9), "one writer's transcript, whole"
    loser = "beta" if winner == "alpha" else "alpha"
    # The session is the first saver's; the other's histories hold turns it never saw, so
    # every one of its saves is refused, out loud, and none overwrote the winner.
    assert outputs[winner].count("saved ") == 8 and "not saved" not in outputs[winner]
    assert outputs[loser].count("refused ") == 8 and "saved " not in outputs[loser]
    assert "session changed by another process" in outputs[loser]
    read_state(manager.active_state_path(manager.store.get("shared")))  # a whole, valid file
    live = manager.resume("shared", engine)
    assert live.report.restored, "the state belongs to the transcript's writer"
    assert engine.messages == messages


def test_kill_9_during_a_branch_save_leaves_the_tree_and_its_states_consistent(tmp_path, engine):
    directory = tmp_path / "sessions"
    for delay_ms in (5, 40):
        proc = start_saver(directory, "t", "tree", 8, 0, slow_ms=2, branches=True)
        try:
            leaves = wait_for_line(proc, "leaves").split()[1:]
            wait_for_line(proc, "saved 1")
            wait_for_line(proc, "begin 3")
            wait_for_line(proc, "writing")
            time.sleep(delay_ms / 1000)
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            proc.stdout.close()
            proc.stderr.close()
        assert integrity(directory) == "ok"
        manager = SessionManager.open(SETTINGS, directory)
        stored = manager.store.get("t")
        contents = [m.content for m in stored.tree[1:]]
        assert contents == [m.content for side in ("left", "right")
                            for m in synthetic_history(f"tree-{side}", 8)[1:]], "both branches, whole"
        # Each saver builds the tree apart: its ids are stored under the first saver's (same content).
        assert stored.messages[-1].id == stored.leaf and len(leaves) == 2
        assert stored.messages[-1].content in {synthetic_history(f"tree-{side}", 8)[-1].content
                                               for side in ("left", "right")}
        for path in manager.state_paths(stored.state_key):  # every installed state file is whole
            read_state(path)
    live = manager.resume("t", engine)
    assert live.report.restored, live.report.fallback
    other = next(m.id for m in engine.tree.children(None) if m.id != engine.messages[1].id)
    assert engine.switch(other).how in ("restored", "kept")


def test_kill_9_while_a_new_leafs_state_is_saved_leaves_a_session_that_resumes_from_a_kept_state(tmp_path, engine):
    """Each save after a turn names a new leaf and removes the old leaf's state, in this order:
    the transcript, then the new leaf's state, then the old one removed. A kill anywhere in
    between leaves the database's active leaf its own state or the old leaf's, which a resume
    restores, prefilling only the rest; never more than the two files, and never none."""
    for delay_ms in (5, 150):  # inside the new state's write; after it (while or after the old goes)
        directory = tmp_path / f"sessions-{delay_ms}"
        proc = start_saver(directory, "g", "grow", 8, 0, slow_ms=2, grow=True)
        try:  # each save follows a turn: on a loaded machine that takes minutes, not seconds
            wait_for_line(proc, "saved 1", timeout=600)
            wait_for_line(proc, "begin 3", timeout=600)
            wait_for_line(proc, "writing")
            time.sleep(delay_ms / 1000)
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            proc.stdout.close()
            proc.stderr.close()
        assert integrity(directory) == "ok"
        manager = SessionManager.open(SETTINGS, directory)
        stored = manager.store.get("g")
        assert len(stored.messages) >= 1 + 2 * (8 + 2)  # the turns saved before the kill, whole
        kept = manager.state_paths(stored.state_key)
        assert 1 <= len(kept) <= 2, kept  # the new leaf's, and the old one's until it is removed
        engine.new_chat()
        live = manager.resume("g", engine)
        assert live.report.restored_tokens > 200, live.report.fallback
        assert engine.messages == stored.messages
        assert list(engine.send("And then?"))[-1].record.prefill_tokens < 120


def test_kill_9_while_keeping_unsent_text_and_scores_leaves_one_whole_value_of_each(tmp_path, engine):
    """Issue 54: the composer's unsent text and a reply's scored probabilities, each 1 MiB and
    written in a transaction of its own, as the TUI writes them: a kill -9 at any point leaves
    the value before or the value being written, whole, and the session's tree untouched."""
    from tests.engine.sessions.session_saver import extra_draft, extra_scores

    directory = tmp_path / "sessions"
    for delay_ms in (0, 2, 8, 20):
        proc = start_saver(directory, "x", "extras", 2, 0, extras=True)
        try:
            wait_for_line(proc, "kept 2")
            time.sleep(delay_ms / 1000)
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            told = proc.stdout.read()  # the last "begin N" printed: N is being written, or was
            proc.stdout.close()
            proc.stderr.close()
        last = max([3] + [int(line.split()[1]) for line in told.splitlines() if line.startswith("begin ")])
        assert integrity(directory) == "ok"
        manager = SessionManager.open(SETTINGS, directory)
        stored = manager.store.get("x")
        assert stored.messages == synthetic_history("extras", 2)
        draft = manager.store.draft("x")
        assert draft in {extra_draft(last - 1), extra_draft(last)}, draft[:20]
        assert list(manager.store.scores("x")) == [stored.messages[-1].id]
        scores = manager.store.scores("x")[stored.messages[-1].id]
        assert scores in {extra_scores(last - 1), extra_scores(last)}, scores[:40]
