"""Session transcripts in SQLite: the source of truth for every saved conversation.

One connection per operation (safe from any thread); WAL and a busy timeout let several
processes use the same database. Each save is one IMMEDIATE transaction and raises the
session's revision. A writer passes the revision it last read or wrote (`base`):

- the session is still at that revision: the writer's transcript replaces the stored one
  from the first message that differs (a regenerated reply replaces the old one);
- another process saved since, but only messages this writer's transcript already starts
  with: the writer's new messages are appended after them;
- anything else (turns the writer has not seen, or the session was removed): the save is
  refused with SessionConflict and nothing is written. No save ever drops another's turns.

A session is followed by its row id, so a rename in another process is followed (the save
lands under the new name) and a removal is final (a running turn cannot resurrect it).
Reads open the database read-only, so listing and exporting work on a full disk or a
read-only folder, and every value read goes through one typed reader
(chatapp.engine.sessions.rows): a row edited into another type reads as a stand-in with a
notice, never as a traceback.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import time
from collections.abc import Callable, Iterator
import dataclasses
from dataclasses import dataclass
from pathlib import Path

from chatapp.engine.chat.tree import MessageTree, is_id
from chatapp.engine.events import Message
from chatapp.engine.retrieval.document import Attachment
from chatapp.engine.sessions.choices import SessionChoices
from chatapp.engine.sessions.attachment_rows import context_json, read_attachments, read_messages, write_attachments
from chatapp.engine.sessions.image_rows import KeptImage, images_column, read_images, write_images
from chatapp.engine.sessions.merge import Conflict, SavePlan, plan_save
from chatapp.engine.sessions.names import free_name, new_state_key, valid_state_key
from chatapp.engine.sessions.records import read_record, record_text
from chatapp.engine.sessions.rows import SESSION_COLUMNS, RowReader, session_row
from chatapp.engine.sessions.schema import SCHEMA_VERSION, check_not_newer, migrate, needs_work, user_version
from chatapp.errors import SessionConflict, SessionError, SessionRemoved
from chatapp.private import make_private_dir, owner_problem, precreate_private

DB_NAME = "sessions.db"
BUSY_TIMEOUT_S = 30.0
_CANNOT_WRITE = {8, 10, 14}
"""SQLite's primary result codes READONLY, IOERR and CANTOPEN: what a read-only folder or a
full disk gives a reader that tries to set up the WAL's shared-memory file."""


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
    leaf: str | None = None
    """The active path's last message (the last message's, when None)."""
    images: tuple[KeptImage, ...] = ()
    """The bytes of every image a message names (chatapp.engine.sessions.image_rows)."""


@dataclass(frozen=True)
class Revision:
    """Where a writer stands: the session's row id and the revision it last read or wrote."""

    session_id: int
    number: int


@dataclass(frozen=True)
class Saved:
    """What a save wrote to."""

    name: str
    """The session's name now: another process may have renamed it since the writer read it."""
    state_key: str
    revision: Revision
    appended: bool = False
    """Another process had saved in between; this writer's new messages went beside its."""
    ids: frozenset[str] = frozenset()
    """The ids of the writer's messages this save kept (what it has now held)."""
    leaf: str | None = None
    """The active leaf this save stored, by its stored id."""
    remap: dict[str, str] = dataclasses.field(default_factory=dict)
    """The writer's ids stored under another (the same message, written apart by another process)."""


@dataclass(frozen=True)
class TurnRow:
    message_idx: int
    """Index, in the snapshot's messages, of the assistant message this turn produced."""
    backend: str
    prefill_tokens: int
    prefill_ms: float
    record: dict
    message_id: str = ""
    """That message's id, when the writer knows it (then `message_idx` is not used)."""


@dataclass(frozen=True)
class StoredSession:
    name: str
    state_key: str
    model: ModelIdentity
    system_prompt: str
    messages: list[Message]
    """The system prompt and the active path: the conversation as it was last shown."""
    window_start: int
    kv_tokens: int
    created_at: float
    updated_at: float
    revision: Revision | None = None
    attachments: tuple[Attachment, ...] = ()
    notices: tuple[str, ...] = ()
    """What could not be loaded as saved (an attachment whose text fails its sha256, ...)."""
    tree: list[Message] = dataclasses.field(default_factory=list)
    """Every message (the system prompt first), in the order written, with ids and parents."""
    leaf: str | None = None
    images: tuple[KeptImage, ...] = ()


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
    first_line: str = ""
    """The first line of its first question, as the lists show it."""


def first_line_of(text: str, limit: int = 60) -> str:
    """A question's first non-empty line, on one line and cut to `limit` characters."""
    line = next((part.strip() for part in text.splitlines() if part.strip()), "")
    line = " ".join(line.split())
    return line if len(line) <= limit else line[:limit - 1] + "…"


def unknown(name: str) -> SessionError:
    return SessionError(f"no session named {name!r}; see: chatapp sessions list")


def changed_elsewhere(name: str) -> SessionConflict:
    return SessionConflict(f"session changed by another process: {name!r} has turns this run has not seen, "
                           "so this run's new turns were not saved")


def removed_elsewhere(name: str) -> SessionRemoved:
    return SessionRemoved(f"session {name!r} was removed by another process; this run's new turns were not saved")


def disk_problem(directory: Path) -> str | None:
    """Why the folder can't take a write, when the file system says so: read-only, or full."""
    try:
        stat = os.statvfs(directory)
    except (OSError, AttributeError):
        return None
    if stat.f_flag & getattr(os, "ST_RDONLY", 1):
        return f"{directory} is on a read-only file system"
    free = (stat.f_bfree if os.geteuid() == 0 else stat.f_bavail) * stat.f_frsize
    if free < 1 << 20:
        return f"the disk holding {directory} is full ({free // 1024:,} KiB free)"
    if not os.access(directory, os.W_OK):
        return f"{directory} is not writable"
    return None


class SessionStore:
    def __init__(self, directory: Path):
        self.directory = Path(directory)
        self.path = self.directory / DB_NAME
        self.was_empty = False
        """The database file existed but held nothing (zero bytes, or no tables yet)."""

    @classmethod
    def open(cls, directory: Path, *, create: bool = True) -> "SessionStore":
        """Check (and if needed create or migrate) the database. Without `create`, a missing
        database reads as empty and nothing is written."""
        store = cls(directory)
        if create:
            with contextlib.suppress(OSError):  # an emptied database (0 bytes), before we create one
                store.was_empty = store.path.stat().st_size == 0
            try:
                make_private_dir(store.directory)
                precreate_private(store.path)  # 0600, and SQLite gives its -wal and -shm the same mode
            except OSError as exc:
                raise SessionError(f"cannot create the sessions folder {store.directory}: "
                                   f"{exc.strerror or exc}") from None
        if problem := owner_problem(store.path):
            raise SessionError(f"the session database {store.path} is not opened: {problem}")
        if create:
            with store._connect() as conn:
                migrate(conn)
        elif store.path.exists():
            with store._connect(readonly=True) as conn:
                version = user_version(conn)
                check_not_newer(version)
                stale = version > 0 and needs_work(conn)
            store.was_empty = version == 0
            if stale:  # an older chatapp's database, or its search index dropped: upgraded once, then read
                try:
                    with store._connect() as conn:
                        migrate(conn)
                except SessionError:
                    if version < SCHEMA_VERSION:
                        raise
                    # only the index is missing, on a disk that takes no write: everything but a search reads
        return store

    @contextlib.contextmanager
    def _connect(self, readonly: bool = False) -> Iterator[sqlite3.Connection]:
        try:
            conn = self._open_readonly() if readonly else sqlite3.connect(
                self.path, timeout=BUSY_TIMEOUT_S, isolation_level=None)
            try:
                conn.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
                conn.execute("PRAGMA foreign_keys = ON")
                conn.execute("PRAGMA synchronous = FULL")
                yield conn
            finally:
                conn.close()
        except sqlite3.Error as exc:
            problem = disk_problem(self.directory) if isinstance(exc, sqlite3.OperationalError) else None
            raise SessionError(f"session database {self.path}: {exc}" + (f" ({problem})" if problem else "")) from None

    def _open_readonly(self) -> sqlite3.Connection:
        """A connection that writes nothing. A WAL database normally needs its -shm file, which
        a read-only folder or a full disk can't create; then, if no -wal holds changes not yet
        in the database file, the file is read as it is (immutable)."""
        uri = self.path.absolute().as_uri()
        conn = sqlite3.connect(f"{uri}?mode=ro", uri=True, timeout=BUSY_TIMEOUT_S, isolation_level=None)
        try:
            conn.execute("PRAGMA schema_version").fetchone()  # the -shm is opened here, not at connect
            return conn
        except sqlite3.OperationalError as exc:
            conn.close()
            wal = self.path.with_name(self.path.name + "-wal")
            if exc.sqlite_errorcode & 0xFF not in _CANNOT_WRITE or (wal.exists() and wal.stat().st_size > 0):
                raise
            return sqlite3.connect(f"{uri}?mode=ro&immutable=1", uri=True, isolation_level=None)

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

    def reading(self) -> contextlib.AbstractContextManager[sqlite3.Connection]:
        """A read-only connection, for a reader outside the store (chatapp.engine.sessions.search)."""
        return self._connect(readonly=True)

    def readable(self) -> bool:
        """Whether there is a database with sessions' tables to read."""
        return self._readable()

    def _readable(self) -> bool:
        return self.path.exists() and not (self.was_empty and not self._has_tables())

    def _has_tables(self) -> bool:
        with self._connect(readonly=True) as conn:
            return user_version(conn) > 0

    # --- writes --------------------------------------------------------------------
    def save(self, snap: Snapshot, turn: TurnRow | None = None, *, base: Revision | None = None,
             seen: frozenset[str] | None = None, branched: frozenset[str] = frozenset(), new: bool = False) -> Saved:
        """Write the tree (and this turn's record) in one transaction; see the module's docstring
        and chatapp.engine.sessions.merge for how `base`, `seen` (the ids the writer last read or
        wrote) and `branched` (its messages that start a branch on purpose) decide what is
        written and when the save is refused.

        `new`: a chat named after its first question, never meant to join a session of that name:
        when another chat has taken the name since it was chosen (two asks started at once with the
        same first line), it takes the next free one, "name 2", and `Saved.name` says which."""
        now = time.time()
        model = snap.model
        system = snap.messages[0].content if snap.messages and snap.messages[0].role == "system" else ""
        with self._transaction() as conn:
            if base is not None:
                row = conn.execute("SELECT id, name, state_key, revision FROM sessions WHERE id = ?",
                                   (base.session_id,)).fetchone()
                if row is None:
                    raise removed_elsewhere(snap.name)
            else:
                row = conn.execute("SELECT id, name, state_key, revision FROM sessions WHERE name = ?",
                                   (snap.name,)).fetchone()
            name = snap.name
            if row is not None and base is None and new:
                row, name = None, free_name(snap.name, lambda wanted: conn.execute(
                    "SELECT 1 FROM sessions WHERE name = ?", (wanted,)).fetchone() is not None)
            if row is None:
                key, revision = new_state_key(), 1
                plan = plan_save([], snap.messages, current=True, seen=None)
                session_id = conn.execute(
                    "INSERT INTO sessions (name, state_key, model, model_path, model_sha256, quant, system_prompt,"
                    " window_start, kv_tokens, created_at, updated_at, revision) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
                    (name, key, model.name, model.path, model.sha256, model.quant, system,
                     snap.window_start, snap.kv_tokens, now, now, revision)).lastrowid
                self._write_system(conn, session_id, [], system, now)
            else:
                reader = RowReader()
                session_id, name = row[0], reader.text(row[1], "name", snap.name)
                key, revision = row[2], reader.integer(row[3], "revision")
                if not valid_state_key(key):  # edited: never a file name; this save gives it a new one
                    key = new_state_key()
                    conn.execute("UPDATE sessions SET state_key = ? WHERE id = ?", (key, session_id))
                stored, _ = read_messages(conn, session_id)
                current = base is not None and revision == base.number
                try:
                    plan = plan_save(stored, snap.messages, current=current, seen=seen, branched=branched)
                except Conflict:
                    raise changed_elsewhere(name) from None
                if current:  # a row whose id was edited away was read (and is written) under a new id
                    conn.execute("DELETE FROM messages WHERE session_id = ? AND role != 'system' AND"
                                 " (id IS NULL OR length(id) != 8)", (session_id,))
                revision += 1
                self._write_system(conn, session_id, stored, system, now)
            leaf = plan.remap.get(snap.leaf, snap.leaf) if snap.leaf is not None else next(
                (m.id for m in reversed(plan.messages) if m.role != "system"), None)
            conn.execute(
                "UPDATE sessions SET model = ?, model_path = ?, model_sha256 = ?, quant = ?, system_prompt = ?,"
                " window_start = ?, kv_tokens = ?, updated_at = ?, revision = ?, active_leaf = ? WHERE id = ?",
                (model.name, model.path, model.sha256, model.quant, system, snap.window_start,
                 snap.kv_tokens, now, revision, leaf, session_id))
            self._apply(conn, session_id, plan, now)
            write_attachments(conn, session_id, snap.attachments)
            write_images(conn, session_id, snap.images)
            if turn is not None:
                message_id = plan.remap.get(turn.message_id, turn.message_id) or plan.messages[turn.message_idx].id
                idx = conn.execute("SELECT idx FROM messages WHERE session_id = ? AND id = ?",
                                   (session_id, message_id)).fetchone()
                record = turn.record  # it names the session it is saved in, which `new` may have moved
                if record.get("session") not in (None, name):
                    record = {**record, "session": name}
                conn.execute(
                    "INSERT OR REPLACE INTO turns (session_id, message_idx, model_sha256, backend, prefill_tokens,"
                    " prefill_ms, record, created_at, message_id) VALUES (?,?,?,?,?,?,?,?,?)",
                    (session_id, idx[0] if idx else -1, model.sha256, turn.backend, turn.prefill_tokens,
                     turn.prefill_ms, record_text(record), now, message_id))
        ids = frozenset(m.id for m in plan.messages if m.id) - plan.deletes
        return Saved(name, key, Revision(session_id, revision), plan.appended, ids, leaf, dict(plan.remap))

    @staticmethod
    def _write_system(conn: sqlite3.Connection, session_id: int, stored: list[Message], system: str,
                      now: float) -> None:
        """The system prompt's row (idx 0, outside the tree): kept as the last save set it."""
        had = bool(stored) and stored[0].role == "system"
        if had and not system:
            conn.execute("DELETE FROM messages WHERE session_id = ? AND role = 'system'", (session_id,))
        elif had:
            conn.execute("UPDATE messages SET content = ? WHERE session_id = ? AND role = 'system'",
                         (system, session_id))
        elif system:
            taken = conn.execute("SELECT 1 FROM messages WHERE session_id = ? AND idx = 0", (session_id,)).fetchone()
            if taken is None:
                conn.execute("INSERT INTO messages (session_id, idx, role, content, stopped, created_at)"
                             " VALUES (?, 0, 'system', ?, 0, ?)", (session_id, system, now))

    @staticmethod
    def _apply(conn: sqlite3.Connection, session_id: int, plan: SavePlan, now: float) -> None:
        for gone in plan.deletes:
            conn.execute("DELETE FROM turns WHERE session_id = ? AND message_id = ?", (session_id, gone))
            conn.execute("DELETE FROM messages WHERE session_id = ? AND id = ?", (session_id, gone))
        conn.executemany(
            "UPDATE messages SET role = ?, content = ?, stopped = ?, context = ?, parent = ?, thinking = ?, images = ?"
            " WHERE session_id = ? AND id = ?",
            [(m.role, m.content, int(m.stopped), context_json(m), m.parent, m.thinking, images_column(m.images),
              session_id, m.id) for m in plan.updates])
        (top,) = conn.execute("SELECT COALESCE(MAX(idx), -1) FROM messages WHERE session_id = ?",
                              (session_id,)).fetchone()
        conn.executemany(
            "INSERT INTO messages (session_id, idx, role, content, stopped, created_at, context, id, parent, thinking,"
            " images) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
            [(session_id, i, m.role, m.content, int(m.stopped), now, context_json(m), m.id, m.parent, m.thinking,
              images_column(m.images)) for i, m in enumerate(plan.inserts, top + 1)])

    def if_current(self, revision: Revision, action: Callable[[], None]) -> bool:
        """Run `action` (e.g. install the session's KV-state file) only while the session is still
        at `revision`, holding the write lock so no save can come in between. False: it wasn't."""
        with self._transaction() as conn:
            row = conn.execute("SELECT revision FROM sessions WHERE id = ?", (revision.session_id,)).fetchone()
            if row is None or RowReader().integer(row[0], "revision") != revision.number:
                return False
            action()
            return True

    def with_tree(self, session_id: int, action: Callable[[dict[str, str | None], str | None], None]) -> bool:
        """Run `action(parents, active_leaf)` with the session's messages as committed now (id ->
        parent id), holding the write lock: no save commits and no state file is installed
        meanwhile. False: the session is gone."""
        with self._transaction() as conn:
            row = conn.execute("SELECT active_leaf FROM sessions WHERE id = ?", (session_id,)).fetchone()
            if row is None:
                return False
            parents = {mid: parent if is_id(parent) else None for mid, parent in conn.execute(
                "SELECT id, parent FROM messages WHERE session_id = ? AND role != 'system'", (session_id,))
                if is_id(mid)}
            action(parents, row[0] if is_id(row[0]) else None)
            return True

    def with_state_keys(self, action: Callable[[set[str]], None]) -> None:
        """Run `action` with every session's state key, holding the write lock (no state file is
        installed or deleted meanwhile)."""
        with self._transaction() as conn:
            action({key for (key,) in conn.execute("SELECT state_key FROM sessions") if valid_state_key(key)})

    def delete(self, name: str, remove_state: Callable[[str], None] | None = None) -> str:
        """Forget a session; returns its state key. `remove_state(key)` runs first, inside the
        transaction: if it raises, the session stays (the state file is never left orphaned).
        A key that is not one chatapp writes names no file of ours: none is removed."""
        if not self._readable():
            raise unknown(name)
        with self._transaction() as conn:
            row = conn.execute("SELECT id, state_key FROM sessions WHERE name = ?", (name,)).fetchone()
            if row is None:
                raise unknown(name)
            key = row[1] if valid_state_key(row[1]) else ""
            if remove_state is not None and key:
                remove_state(key)
            conn.execute("DELETE FROM sessions WHERE id = ?", (row[0],))
        return key

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
        with self._connect(readonly=True) as conn:
            raw = conn.execute(f"SELECT {SESSION_COLUMNS} FROM sessions WHERE name = ?", (name,)).fetchone()
            if raw is None:
                return None
            reader = RowReader()
            row = session_row(reader, raw)
            everything, lost = read_messages(conn, row.id)
            attachments, dropped = read_attachments(conn, row.id)
            images, unreadable = read_images(conn, row.id)
            (leaf,) = conn.execute("SELECT active_leaf FROM sessions WHERE id = ?", (row.id,)).fetchone()
        notices = [f"session row: {notice}" for notice in reader.notices] + lost + dropped + unreadable
        tree = MessageTree.from_messages(everything, leaf if isinstance(leaf, str) else None)
        system = [m for m in everything[:1] if m.role == "system"]
        return StoredSession(name, row.state_key, ModelIdentity(row.model, row.model_path, row.model_sha256, row.quant),
                             row.system_prompt, system + tree.path(), row.window_start, row.kv_tokens, row.created_at,
                             row.updated_at, Revision(row.id, row.revision), tuple(attachments), tuple(notices),
                             system + tree.messages(), tree.leaf, tuple(images))

    def has(self, name: str) -> bool:
        """Whether a session of this name exists (without reading it: naming a new chat asks this
        for every "name 2", "name 3", ... in use)."""
        if not self._readable():
            return False
        with self._connect(readonly=True) as conn:
            return conn.execute("SELECT 1 FROM sessions WHERE name = ?", (name,)).fetchone() is not None

    def current(self, session_id: int) -> tuple[str, int] | None:
        """The session's name and revision now, or None once it has been removed."""
        if not self._readable():
            return None
        with self._connect(readonly=True) as conn:
            row = conn.execute("SELECT name, revision FROM sessions WHERE id = ?", (session_id,)).fetchone()
        if row is None:
            return None
        reader = RowReader()
        return reader.text(row[0], "name", "(unreadable name)"), reader.integer(row[1], "revision")

    def get(self, name: str) -> StoredSession:
        found = self.load(name)
        if found is None:
            raise unknown(name)
        return found

    def summaries(self) -> list[SessionSummary]:
        if not self._readable():
            return []
        with self._connect(readonly=True) as conn:
            rows = conn.execute(
                "SELECT s.name, s.state_key, s.model, s.quant,"
                " (SELECT COUNT(*) FROM messages m WHERE m.session_id = s.id AND m.role = 'user'),"
                " s.kv_tokens, s.created_at, s.updated_at,"
                " (SELECT substr(m.content, 1, 400) FROM messages m WHERE m.session_id = s.id AND m.role = 'user'"
                "  ORDER BY m.idx LIMIT 1)"
                " FROM sessions s ORDER BY s.updated_at DESC").fetchall()
        read = RowReader()  # a listing shows what it can: its notices would repeat what `show` says
        return [SessionSummary(read.text(name, "name", "(unreadable name)"), read.text(key, "state key"),
                               read.text(model, "model", "unknown"), read.text(quant, "quant", "unknown"),
                               turns, read.integer(kv, "kv tokens"), read.number(created, "created"),
                               read.number(updated, "updated"), first_line_of(read.text(first or "", "question")))
                for name, key, model, quant, turns, kv, created, updated, first in rows]

    def turn_records(self, name: str) -> list[tuple[int, dict]]:
        """(assistant message index, TurnRecord json) for each saved turn, in order."""
        return [(idx, record) for idx, record, _ in self._turn_rows(name)]

    def records_by_message(self, name: str) -> dict[str, dict]:
        """Each saved turn's record (TurnRecord json), by the id of the reply it produced."""
        return {message_id: record for _, record, message_id in self._turn_rows(name) if message_id}

    def _turn_rows(self, name: str) -> list[tuple[int, dict, str]]:
        if not self._readable():
            raise unknown(name)
        with self._connect(readonly=True) as conn:
            row = conn.execute("SELECT id FROM sessions WHERE name = ?", (name,)).fetchone()
            if row is None:
                raise unknown(name)
            rows = conn.execute("SELECT rowid, typeof(record), message_idx, message_id, prefill_tokens, prefill_ms,"
                                " backend FROM turns WHERE session_id = ? ORDER BY message_idx", (row[0],)).fetchall()
            records, read = [], RowReader()
            for rowid, kind, idx, message_id, prefill_tokens, prefill_ms, backend in rows:
                summary = {"prefill_tokens": read.integer(prefill_tokens, "prefill tokens"),  # for a long record
                           "prefill_ms": read.number(prefill_ms, "prefill ms"),
                           "backend": read.text(backend, "backend")}
                records.append((read.integer(idx, "message index", -1), read_record(conn, rowid, kind, summary),
                                message_id if is_id(message_id) else ""))
        return records

    def set_leaf(self, name: str, message_id: str) -> None:
        """Make the path ending at `message_id` the session's active one (a checkout), raising the
        revision so a process holding the session sees that it changed."""
        if not self._readable():
            raise unknown(name)
        with self._transaction() as conn:
            row = conn.execute("SELECT id FROM sessions WHERE name = ?", (name,)).fetchone()
            if row is None:
                raise unknown(name)
            if conn.execute("SELECT 1 FROM messages WHERE session_id = ? AND id = ?",
                            (row[0], message_id)).fetchone() is None:
                raise SessionError(f"session {name!r} has no message {message_id} (deleted meanwhile?)")
            conn.execute("UPDATE sessions SET active_leaf = ?, revision = revision + 1, updated_at = ? WHERE id = ?",
                         (message_id, time.time(), row[0]))

    def prefill_speed(self, model_sha256: str, backend: str, *, min_tokens: int = 16, last: int = 20) -> float | None:
        """Prefill tokens per second measured on this machine over recent turns, or None."""
        if not self._readable():
            return None
        with self._connect(readonly=True) as conn:
            tokens, ms = conn.execute(
                "SELECT SUM(prefill_tokens), SUM(prefill_ms) FROM (SELECT prefill_tokens, prefill_ms FROM turns"
                " WHERE model_sha256 = ? AND backend = ? AND prefill_tokens >= ? AND prefill_ms > 0"
                " ORDER BY created_at DESC LIMIT ?)", (model_sha256, backend, min_tokens, last)).fetchone()
        return tokens * 1000.0 / ms if tokens and ms else None

    # --- what a session keeps besides its tree: a draft, replies scored after the fact ----------
    def set_draft(self, name: str, text: str) -> None:
        """Keep `text`, typed but not sent, as session `name`'s draft ("" forgets it)."""
        with self._transaction() as conn:
            if conn.execute("UPDATE sessions SET draft = ? WHERE name = ?", (text, name)).rowcount == 0:
                raise unknown(name)

    def draft(self, name: str) -> str:
        """Session `name`'s draft ("" when it has none, or there is no such session)."""
        if not self._readable():
            return ""
        with self._connect(readonly=True) as conn:
            row = conn.execute("SELECT draft FROM sessions WHERE name = ?", (name,)).fetchone()
        return row[0] if row is not None and isinstance(row[0], str) else ""

    def set_choices(self, name: str, choices: SessionChoices) -> None:
        """Keep what the user chose for session `name` (chatapp.engine.sessions.choices)."""
        with self._transaction() as conn:
            if conn.execute("UPDATE sessions SET choices = ? WHERE name = ?",
                            (choices.to_json(), name)).rowcount == 0:
                raise unknown(name)

    def choices(self, name: str) -> SessionChoices:
        """What `set_choices` kept for session `name` (nothing chosen when there is none, or
        what is kept cannot be read: an edited database costs the choice, not the session)."""
        if not self._readable():
            return SessionChoices()
        with self._connect(readonly=True) as conn:
            row = conn.execute("SELECT choices FROM sessions WHERE name = ?", (name,)).fetchone()
        return SessionChoices.from_json(row[0]) if row is not None else SessionChoices()

    def keep_scores(self, name: str, message_id: str, probs: str) -> None:
        """Keep reply `message_id`'s probabilities, scored after it was written (TokenProbs.to_json
        each, as JSON text), with session `name`."""
        with self._transaction() as conn:
            row = conn.execute("SELECT id FROM sessions WHERE name = ?", (name,)).fetchone()
            if row is None:
                raise unknown(name)
            conn.execute("INSERT OR REPLACE INTO scores (session_id, message_id, probs) VALUES (?,?,?)",
                         (row[0], message_id, probs))

    def scores(self, name: str) -> dict[str, str]:
        """The probabilities kept by `keep_scores`, as JSON text by reply id."""
        if not self._readable():
            return {}
        with self._connect(readonly=True) as conn:
            rows = conn.execute("SELECT c.message_id, c.probs FROM scores c JOIN sessions s ON s.id = c.session_id"
                                " WHERE s.name = ?", (name,)).fetchall()
        return {mid: probs for mid, probs in rows if is_id(mid) and isinstance(probs, str)}
