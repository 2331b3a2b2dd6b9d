"""Session transcripts in SQLite: the source of truth for every saved conversation.

One connection per operation (safe from any thread); WAL and a busy timeout let several
processes save the same session: each save is one IMMEDIATE transaction, so the last writer
wins whole and nothing interleaves.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from chatapp.engine.events import Message
from chatapp.engine.retrieval.document import Attachment
from chatapp.engine.sessions.attachment_rows import context_json, read_attachments, read_messages, write_attachments
from chatapp.engine.sessions.schema import migrate
from chatapp.errors import SessionError
from chatapp.private import make_private_dir, owner_problem, precreate_private

DB_NAME = "sessions.db"
BUSY_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class ModelIdentity:
    name: str
    path: str
    sha256: str
    quant: str


@dataclass(frozen=True)
class Snapshot:
    """What one save writes: the whole transcript as the chat holds it now."""

    name: str
    model: ModelIdentity
    messages: list[Message]
    window_start: int
    kv_tokens: int
    attachments: tuple[Attachment, ...] = ()


@dataclass(frozen=True)
class TurnRow:
    message_idx: int
    """Index of the assistant message this turn produced."""
    backend: str
    prefill_tokens: int
    prefill_ms: float
    record: dict


@dataclass(frozen=True)
class StoredSession:
    name: str
    state_key: str
    model: ModelIdentity
    system_prompt: str
    messages: list[Message]
    window_start: int
    kv_tokens: int
    created_at: float
    updated_at: float
    attachments: tuple[Attachment, ...] = ()
    notices: tuple[str, ...] = ()
    """What could not be loaded as saved (an attachment whose text fails its sha256, ...)."""


@dataclass(frozen=True)
class SessionSummary:
    name: str
    state_key: str
    model: str
    quant: str
    turns: int
    kv_tokens: int
    created_at: float
    updated_at: float


def unknown(name: str) -> SessionError:
    return SessionError(f"no session named {name!r}; see: chatapp sessions list")


class SessionStore:
    def __init__(self, directory: Path):
        self.directory = Path(directory)
        self.path = self.directory / DB_NAME

    @classmethod
    def open(cls, directory: Path, *, create: bool = True) -> "SessionStore":
        """Check (and if needed create or migrate) the database. Without `create`, a missing
        database reads as empty and nothing is written."""
        store = cls(directory)
        if create:
            try:
                make_private_dir(store.directory)
                precreate_private(store.path)  # 0600, and SQLite gives its -wal and -shm the same mode
            except OSError as exc:
                raise SessionError(f"cannot create the sessions folder {store.directory}: "
                                   f"{exc.strerror or exc}") from None
        if problem := owner_problem(store.path):
            raise SessionError(f"the session database {store.path} is not opened: {problem}")
        if create or store.path.exists():
            with store._connect() as conn:
                migrate(conn)
        return store

    @contextlib.contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        try:
            conn = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S, isolation_level=None)
            try:
                conn.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
                conn.execute("PRAGMA foreign_keys = ON")
                conn.execute("PRAGMA synchronous = FULL")
                yield conn
            finally:
                conn.close()
        except sqlite3.Error as exc:
            raise SessionError(f"session database {self.path}: {exc}") from None

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        with self._connect() as conn:
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise

    def _readable(self) -> bool:
        return self.path.exists()

    # --- writes --------------------------------------------------------------------
    def save(self, snap: Snapshot, turn: TurnRow | None = None) -> str:
        """Write the transcript (and this turn's record) in one transaction. Returns the
        session's state key, which names its KV-state file."""
        now = time.time()
        model = snap.model
        system = snap.messages[0].content if snap.messages and snap.messages[0].role == "system" else ""
        with self._transaction() as conn:
            row = conn.execute("SELECT id, state_key FROM sessions WHERE name = ?", (snap.name,)).fetchone()
            if row is None:
                key = uuid.uuid4().hex
                cur = conn.execute(
                    "INSERT INTO sessions (name, state_key, model, model_path, model_sha256, quant, system_prompt,"
                    " window_start, kv_tokens, created_at, updated_at) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                    (snap.name, key, model.name, model.path, model.sha256, model.quant, system,
                     snap.window_start, snap.kv_tokens, now, now))
                session_id = cur.lastrowid
            else:
                session_id, key = row
                conn.execute(
                    "UPDATE sessions SET model = ?, model_path = ?, model_sha256 = ?, quant = ?, system_prompt = ?,"
                    " window_start = ?, kv_tokens = ?, updated_at = ? WHERE id = ?",
                    (model.name, model.path, model.sha256, model.quant, system, snap.window_start,
                     snap.kv_tokens, now, session_id))
            stored, _ = read_messages(conn, session_id)
            same = 0
            while same < min(len(stored), len(snap.messages)) and stored[same] == snap.messages[same]:
                same += 1
            conn.execute("DELETE FROM messages WHERE session_id = ? AND idx >= ?", (session_id, same))
            conn.execute("DELETE FROM turns WHERE session_id = ? AND message_idx >= ?", (session_id, same))
            conn.executemany(
                "INSERT INTO messages (session_id, idx, role, content, stopped, created_at, context)"
                " VALUES (?,?,?,?,?,?,?)",
                [(session_id, i, m.role, m.content, int(m.stopped), now, context_json(m))
                 for i, m in enumerate(snap.messages[same:], same)])
            write_attachments(conn, session_id, snap.attachments)
            if turn is not None:
                conn.execute(
                    "INSERT OR REPLACE INTO turns (session_id, message_idx, model_sha256, backend, prefill_tokens,"
                    " prefill_ms, record, created_at) VALUES (?,?,?,?,?,?,?,?)",
                    (session_id, turn.message_idx, model.sha256, turn.backend, turn.prefill_tokens,
                     turn.prefill_ms, json.dumps(turn.record, ensure_ascii=False), now))
        return key

    def delete(self, name: str) -> str:
        """Forget a session; returns its state key so the caller can remove the state file."""
        if not self._readable():
            raise unknown(name)
        with self._transaction() as conn:
            row = conn.execute("SELECT id, state_key FROM sessions WHERE name = ?", (name,)).fetchone()
            if row is None:
                raise unknown(name)
            conn.execute("DELETE FROM sessions WHERE id = ?", (row[0],))
        return row[1]

    def rename(self, old: str, new: str) -> None:
        if not self._readable():
            raise unknown(old)
        with self._transaction() as conn:
            if conn.execute("SELECT 1 FROM sessions WHERE name = ?", (old,)).fetchone() is None:
                raise unknown(old)
            if conn.execute("SELECT 1 FROM sessions WHERE name = ?", (new,)).fetchone() is not None:
                raise SessionError(f"a session named {new!r} already exists")
            conn.execute("UPDATE sessions SET name = ?, updated_at = ? WHERE name = ?", (new, time.time(), old))

    # --- reads ---------------------------------------------------------------------
    def load(self, name: str) -> StoredSession | None:
        if not self._readable():
            return None
        with self._connect() as conn:
            row = conn.execute(
                "SELECT id, state_key, model, model_path, model_sha256, quant, system_prompt, window_start,"
                " kv_tokens, created_at, updated_at FROM sessions WHERE name = ?", (name,)).fetchone()
            if row is None:
                return None
            messages, lost = read_messages(conn, row[0])
            attachments, dropped = read_attachments(conn, row[0])
        return StoredSession(name, row[1], ModelIdentity(row[2], row[3], row[4], row[5]), row[6], messages,
                             row[7], row[8], row[9], row[10], tuple(attachments), tuple(lost + dropped))

    def get(self, name: str) -> StoredSession:
        found = self.load(name)
        if found is None:
            raise unknown(name)
        return found

    def summaries(self) -> list[SessionSummary]:
        if not self._readable():
            return []
        with self._connect() as conn:
            rows = conn.execute(
                "SELECT s.name, s.state_key, s.model, s.quant,"
                " (SELECT COUNT(*) FROM messages m WHERE m.session_id = s.id AND m.role = 'user'),"
                " s.kv_tokens, s.created_at, s.updated_at FROM sessions s ORDER BY s.updated_at DESC").fetchall()
        return [SessionSummary(*row) for row in rows]

    def turn_records(self, name: str) -> list[tuple[int, dict]]:
        """(assistant message index, TurnRecord json) for each saved turn, in order."""
        if not self._readable():
            raise unknown(name)
        with self._connect() as conn:
            row = conn.execute("SELECT id FROM sessions WHERE name = ?", (name,)).fetchone()
            if row is None:
                raise unknown(name)
            rows = conn.execute("SELECT message_idx, record FROM turns WHERE session_id = ? ORDER BY message_idx",
                                (row[0],)).fetchall()
        records = []
        for idx, raw in rows:
            try:
                data = json.loads(raw)
            except ValueError:
                data = {}
            records.append((idx, data if isinstance(data, dict) else {}))
        return records

    def prefill_speed(self, model_sha256: str, backend: str, *, min_tokens: int = 16, last: int = 20) -> float | None:
        """Prefill tokens per second measured on this machine over recent turns, or None."""
        if not self._readable():
            return None
        with self._connect() as conn:
            tokens, ms = conn.execute(
                "SELECT SUM(prefill_tokens), SUM(prefill_ms) FROM (SELECT prefill_tokens, prefill_ms FROM turns"
                " WHERE model_sha256 = ? AND backend = ? AND prefill_tokens >= ? AND prefill_ms > 0"
                " ORDER BY created_at DESC LIMIT ?)", (model_sha256, backend, min_tokens, last)).fetchone()
        return tokens * 1000.0 / ms if tokens and ms else None
