"""Hostile session data end to end, on the real default model: a sessions.db and a model-info
cache edited into types chatapp never writes, a state key that climbs out of the states folder,
a full disk under `sessions export --output`, and Ctrl+C while a session opens. Each is one
clear line, exit 0 where the work could go on, and nothing is lost; never a traceback."""

from __future__ import annotations

import json
import os
import shlex
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

import chatapp.commands.core  # noqa: F401 - registers ask on the app the in-process runner uses
from chatapp import paths
from chatapp.engine.events import Message
from chatapp.engine.sessions import SessionManager
from chatapp.engine.sessions.store import ModelIdentity, SessionStore, Snapshot
from tests.cli.conftest import records
from tests.cli.namespaces import namespace_run

ASK = ("--json", "--temperature", "0", "--max-tokens", "8", "--ctx", "1024", "--threads", "1")


def db() -> Path:
    return paths.sessions_dir() / "sessions.db"


def edit(sql: str, *args) -> None:
    with sqlite3.connect(db()) as conn:
        conn.execute(sql, args)


def clean(out: subprocess.CompletedProcess) -> None:
    assert "Traceback" not in out.stderr and "Error:" not in out.stderr.replace("chatapp: ", ""), out.stderr


@pytest.fixture
def notes(tmp_path) -> Path:
    path = tmp_path / "notes.txt"
    path.write_text("The staging server is called heron.\nIt listens on port 8443.\n")
    return path


@pytest.fixture
def session(chatapp_exe, notes) -> list[Message]:
    """Session "s": one turn that placed an attachment's text, saved by the real ask."""
    records(chatapp_exe("ask", "--session", "s", "Which port does heron listen on?", "--attach", str(notes), *ASK))
    return SessionStore(paths.sessions_dir()).get("s").messages


@pytest.mark.parametrize(("sql", "notice"), [
    ("UPDATE messages SET content = X'00FF' WHERE idx = 2",
     "the content of message 2 is a 2-byte BLOB, not text; shown as unreadable"),
    ("UPDATE attachments SET text = X'00'", "attachment dropped: notes.txt: its saved text is a 1-byte BLOB, not text"),
    ("UPDATE messages SET context = json_set(context, '$.text', 5) WHERE idx = 1",
     "the attachment text placed in message 1 could not be read (its text is an integer, not text); left out"),
    ("UPDATE sessions SET revision = 'abc'", "its revision is the text 'abc', not a whole number; read as 0"),
    ("UPDATE sessions SET created_at = 'x', model = X'00'", "its creation time is the text 'x', not a number"),
])
def test_a_wrong_typed_row_is_a_notice_and_the_session_still_opens(chatapp_exe, session, sql, notice):
    edit(sql)
    for args in (("sessions", "show", "s"), ("sessions", "export", "s"), ("sessions", "export", "s", "-f", "json")):
        out = chatapp_exe(*args)
        assert out.returncode == 0 and notice in out.stderr, out.stderr
        clean(out)
    out = chatapp_exe("ask", "--session", "s", "Thanks. And its name?", *ASK)
    [record] = records(out)
    assert notice in out.stderr and record["session"] == "s"
    clean(out)
    after = SessionStore(paths.sessions_dir()).get("s").messages
    assert len(after) == len(session) + 2 and after[-2].content == "Thanks. And its name?"
    with sqlite3.connect(db()) as conn:  # the damaged row is kept as it was (where it is a message)
        if "messages SET content" in sql:
            assert conn.execute("SELECT content FROM messages WHERE idx = 2").fetchone() == (b"\x00\xff",)


# --- state keys ------------------------------------------------------------------------------------
def test_an_edited_state_key_never_writes_or_removes_outside_the_states_folder(chatapp_exe, session, tmp_path):
    target = tmp_path / "evil"
    key = os.path.relpath(target, paths.sessions_dir() / "states")  # ../../../evil, from where states live
    edit("UPDATE sessions SET state_key = ?", key)
    out = chatapp_exe("ask", "--session", "s", "Thanks.", *ASK)
    records(out)
    assert f"saved KV state not used (the state key {key!r} in the session database is not one chatapp writes)" \
        in out.stderr
    assert not target.with_suffix(".kvstate").exists()
    stored = SessionStore(paths.sessions_dir()).get("s")
    new_key = stored.state_key
    assert new_key != key and (paths.sessions_dir() / "states" / f"{new_key}-{stored.leaf}.kvstate").exists()

    target.with_suffix(".kvstate").write_bytes(b"someone else's file")
    edit("UPDATE sessions SET state_key = ?", key)
    out = chatapp_exe("sessions", "rm", "s")
    assert out.returncode == 0, out.stderr
    assert target.with_suffix(".kvstate").read_bytes() == b"someone else's file"
    assert SessionStore(paths.sessions_dir()).load("s") is None


# --- the model-info cache --------------------------------------------------------------------------
@pytest.mark.parametrize("change", [{"weight_bytes": None}, {"tensor_mix": [1, 2]}, {"context_length": "x"},
                                    {"n_layer": -3}, {"bits_per_weight": "NaN"}])
def test_a_wrong_typed_model_info_cache_is_rebuilt(chatapp_exe, change):
    assert chatapp_exe("models", "info").returncode == 0
    cache = paths.cache_dir() / "model_info.json"
    original = json.loads(cache.read_text())

    def damage() -> None:
        data = json.loads(cache.read_text())
        [entry] = data["entries"].values()
        entry["value"]["info"].update(change)
        cache.write_text(json.dumps(data))

    damage()
    out = chatapp_exe("models", "info")
    assert out.returncode == 0, out.stderr
    clean(out)
    assert json.loads(cache.read_text()) == original  # the entry was built again and rewritten
    damage()
    out = chatapp_exe("ask", "Name a fruit.", *ASK)
    records(out)
    clean(out)


def test_an_edited_sha256_cache_is_hashed_again(chatapp_exe):
    records(chatapp_exe("ask", "--session", "h", "Name a colour.", *ASK))
    cache = paths.cache_dir() / "sha256.json"
    data = json.loads(cache.read_text())
    [(model, entry)] = data["entries"].items()
    digest, entry["value"] = entry["value"], "not a digest"
    cache.write_text(json.dumps(data))
    [record] = records(chatapp_exe("ask", "--session", "h", "Name another one.", *ASK))
    assert record["restored_tokens"] > 0  # the model's fingerprint is its real sha256 again
    assert json.loads(cache.read_text())["entries"][model]["value"] == digest


# --- sessions export on a full disk ----------------------------------------------------------------
def seed() -> None:
    store = SessionStore.open(paths.sessions_dir())
    messages = [Message("system", "Be brief."), Message("user", "Tell me a story. " * 2000),
                Message("assistant", "No.")]
    store.save(Snapshot("work", ModelIdentity("m", "/m.gguf", "ab" * 32, "Q4_1"), messages, 1, 0))


def test_export_to_a_full_disk_leaves_no_file_and_is_an_output_error(tmp_path):
    """A 64 KiB tmpfs, filled: the real ENOSPC, mounted as root of new user and mount namespaces
    (no root needed). A plain export leaves no file; --force over an existing one leaves it as it was."""
    seed()
    exe = shlex.quote(str(Path(sys.executable).with_name("chatapp")))
    full, out = tmp_path / "full", tmp_path / "out"
    full.mkdir()
    out.mkdir()
    target, kept = full / "work.md", full / "kept.md"
    q = shlex.quote
    fill = f"dd if=/dev/zero of={q(str(full / 'filler'))} bs=4k 2>/dev/null || true"
    script = f"""
mount -t tmpfs -o size=64k tmpfs {q(str(full))}
{fill}
{exe} sessions export work --output {q(str(target))} >/dev/null 2>{q(str(out / 'plain.err'))} \
    || echo $? > {q(str(out / 'plain.rc'))}
ls -A {q(str(full))} > {q(str(out / 'plain.ls'))}
rm {q(str(full / 'filler'))}
printf 'the old export' > {q(str(kept))}
{fill}
{exe} sessions export work --output {q(str(kept))} --force >/dev/null 2>{q(str(out / 'force.err'))} \
    || echo $? > {q(str(out / 'force.rc'))}
cat {q(str(kept))} > {q(str(out / 'kept'))}
ls -A {q(str(full))} > {q(str(out / 'force.ls'))}
"""
    run = namespace_run(script, {**os.environ, "COLUMNS": "200"})
    assert run.returncode == 0, run.stderr
    assert (out / "plain.rc").read_text().strip() == "1"
    assert (out / "plain.err").read_text().strip() == \
        f"chatapp: Output: cannot write {target}: No space left on device; nothing was written"
    assert (out / "plain.ls").read_text().split() == ["filler"]
    assert (out / "force.rc").read_text().strip() == "1"
    assert "chatapp: Output: cannot write" in (out / "force.err").read_text()
    assert (out / "kept").read_text() == "the old export"
    assert sorted((out / "force.ls").read_text().split()) == ["filler", "kept.md"]


# --- Ctrl+C while a session opens ------------------------------------------------------------------
def test_one_ctrl_c_while_a_session_opens_stops_it(invoke, monkeypatch):
    result = invoke("ask", "--session", "s", "Name a colour.", *ASK)
    assert result.exit_code == 0, result.output
    before = SessionStore(paths.sessions_dir()).get("s")
    resume = SessionManager.resume

    def interrupted(self, *args, **kwargs):
        os.kill(os.getpid(), signal.SIGINT)  # Ctrl+C, delivered while the session is being opened
        return resume(self, *args, **kwargs)

    monkeypatch.setattr(SessionManager, "resume", interrupted)
    result = invoke("ask", "--session", "s", "Name another one.", *ASK)
    assert result.exit_code == 130, result.output
    assert "stopped while opening session 's'; nothing was sent or saved" in result.stderr
    assert result.stdout == ""  # no turn ran
    assert SessionStore(paths.sessions_dir()).get("s") == before
