"""The session database's schema, its version (PRAGMA user_version) and migrations.

Migration N (1-based) takes a database from version N-1 to N. A database whose version is
above ours was written by a newer chatapp and is refused rather than guessed at.
"""

from __future__ import annotations

import secrets
import sqlite3
import time
from collections.abc import Callable

from chatapp.engine.sessions import search_index
from chatapp.errors import SessionError


def _linear_to_tree(conn: sqlite3.Connection) -> None:
    """Schema 4: each session's transcript becomes one path of a tree. Every message but the
    system prompt gets a short id (chatapp.engine.chat.tree's form) and the one before it as its
    parent; the last one is the active leaf; each turn record names its reply by id."""
    sessions = [row[0] for row in conn.execute("SELECT id FROM sessions")]
    for session_id in sessions:
        taken: set[str] = set()
        parent = None
        rows = conn.execute("SELECT idx, role FROM messages WHERE session_id = ? ORDER BY idx", (session_id,))
        for idx, role in rows.fetchall():
            if role == "system":
                continue
            while (message_id := secrets.token_hex(4)) in taken:
                pass
            taken.add(message_id)
            conn.execute("UPDATE messages SET id = ?, parent = ? WHERE session_id = ? AND idx = ?",
                         (message_id, parent, session_id, idx))
            parent = message_id
        conn.execute("UPDATE sessions SET active_leaf = ? WHERE id = ?", (parent, session_id))
    conn.execute("UPDATE turns SET message_id = (SELECT m.id FROM messages m WHERE m.session_id = turns.session_id"
                 " AND m.idx = turns.message_idx)")


def _thoughts_apart(conn: sqlite3.Connection) -> None:
    """Schema 5: a reply's thought is kept apart from its answer. Replies saved before, whose
    text holds a thinking model's raw thought (`<think>…</think>`, or R1's thought with only its
    closing marker, the generation prompt having opened it), get it moved to the new column."""
    rows = conn.execute("SELECT session_id, idx, content FROM messages WHERE role = 'assistant'"
                        " AND content LIKE '%</think>%'").fetchall()
    for session_id, idx, content in rows:
        head, _, answer = content.partition("</think>")
        thought = head.lstrip()
        thought = thought[len("<think>"):] if thought.startswith("<think>") else head
        conn.execute("UPDATE messages SET content = ?, thinking = ? WHERE session_id = ? AND idx = ?",
                     (answer.lstrip(), thought, session_id, idx))


Step = str | Callable[[sqlite3.Connection], None]

MIGRATIONS: tuple[tuple[Step, ...], ...] = (
    (  # 1: sessions, their messages, and one performance record per completed turn
        """CREATE TABLE sessions (
            id INTEGER PRIMARY KEY,
            name TEXT NOT NULL UNIQUE,
            state_key TEXT NOT NULL UNIQUE,
            model TEXT NOT NULL,
            model_path TEXT NOT NULL,
            model_sha256 TEXT NOT NULL,
            quant TEXT NOT NULL,
            system_prompt TEXT NOT NULL,
            window_start INTEGER NOT NULL,
            kv_tokens INTEGER NOT NULL DEFAULT 0,
            created_at REAL NOT NULL,
            updated_at REAL NOT NULL)""",
        """CREATE TABLE messages (
            session_id INTEGER NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
            idx INTEGER NOT NULL,
            role TEXT NOT NULL,
            content TEXT NOT NULL,
            stopped INTEGER NOT NULL DEFAULT 0,
            created_at REAL NOT NULL,
            PRIMARY KEY (session_id, idx))""",
        """CREATE TABLE turns (
            session_id INTEGER NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
            message_idx INTEGER NOT NULL,
            model_sha256 TEXT NOT NULL,
            backend TEXT NOT NULL,
            prefill_tokens INTEGER NOT NULL,
            prefill_ms REAL NOT NULL,
            record TEXT NOT NULL,
            created_at REAL NOT NULL,
            PRIMARY KEY (session_id, message_idx))""",
        "CREATE INDEX turns_by_model ON turns (model_sha256, backend, created_at)",
    ),
    (  # 2: a revision per session, raised by every save, so a writer can tell that another process saved
        "ALTER TABLE sessions ADD COLUMN revision INTEGER NOT NULL DEFAULT 0",
    ),
    (  # 3: attachments (their text and sha256) and the retrieved block each user message carried
        "ALTER TABLE messages ADD COLUMN context TEXT",
        """CREATE TABLE attachments (
            session_id INTEGER NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
            idx INTEGER NOT NULL,
            name TEXT NOT NULL,
            kind TEXT NOT NULL,
            sha256 TEXT NOT NULL,
            page_starts TEXT NOT NULL,
            text TEXT NOT NULL,
            PRIMARY KEY (session_id, idx))""",
    ),
    (  # 4: conversations are trees: messages get an id and a parent, sessions an active leaf
        "ALTER TABLE messages ADD COLUMN id TEXT",
        "ALTER TABLE messages ADD COLUMN parent TEXT",
        "ALTER TABLE sessions ADD COLUMN active_leaf TEXT",
        "ALTER TABLE turns ADD COLUMN message_id TEXT",
        _linear_to_tree,
        "CREATE UNIQUE INDEX messages_by_id ON messages (session_id, id)",
    ),
    (  # 5: a reply's thought apart from its answer (thinking models, chatapp.engine.thinking)
        "ALTER TABLE messages ADD COLUMN thinking TEXT NOT NULL DEFAULT ''",
        _thoughts_apart,
    ),
    (  # 6: what a session keeps besides its tree: the composer's unsent text, and the probabilities
       # of replies scored after they were written (the confidence view), by reply id
        "ALTER TABLE sessions ADD COLUMN draft TEXT NOT NULL DEFAULT ''",
        """CREATE TABLE scores (
            session_id INTEGER NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
            message_id TEXT NOT NULL,
            probs TEXT NOT NULL,
            PRIMARY KEY (session_id, message_id))""",
    ),
    (  # 7: what the user chose for a session beyond its settings' defaults (chatapp.engine.sessions.choices):
       # the thinking mode, how earlier thoughts are kept and the tool choice, as a JSON object
        "ALTER TABLE sessions ADD COLUMN choices TEXT NOT NULL DEFAULT '{}'",
    ),
    (  # 8: a full-text index over every message of every branch, kept by triggers
       # (chatapp.engine.sessions.search_index), built from the messages already saved
        search_index.build,
    ),
    (  # 9: images: the hashes of a question's images, and each image's bytes once a session
       # (chatapp.engine.sessions.image_rows)
        "ALTER TABLE messages ADD COLUMN images TEXT NOT NULL DEFAULT ''",
        """CREATE TABLE images (
            session_id INTEGER NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
            sha256 TEXT NOT NULL,
            name TEXT NOT NULL,
            data BLOB NOT NULL,
            PRIMARY KEY (session_id, sha256))""",
    ),
)
SCHEMA_VERSION = len(MIGRATIONS)


def user_version(conn: sqlite3.Connection) -> int:
    return int(conn.execute("PRAGMA user_version").fetchone()[0])


def check_not_newer(version: int) -> None:
    if version > SCHEMA_VERSION:
        raise SessionError(f"session database is from a newer chatapp (schema {version} > {SCHEMA_VERSION})")


def needs_work(conn: sqlite3.Connection) -> bool:
    """Whether `migrate` has something to do: an older schema, or a search index (or one of its
    triggers) dropped since, which it builds again from the messages."""
    version = user_version(conn)
    check_not_newer(version)
    return version < SCHEMA_VERSION or not search_index.complete(conn)


WAL_SWITCH_TIMEOUT_S = 30.0


def use_wal(conn: sqlite3.Connection, timeout_s: float = WAL_SWITCH_TIMEOUT_S) -> None:
    """Put the database in WAL mode. SQLite answers this pragma "database is locked" at once,
    without the busy handler, while another connection holds a lock: two openers of a new
    database (the TUI's early open and its first turn, two `chatapp ask` at once) failed 7 times
    in 60 here. So it is tried again until the other is done, as busy_timeout would."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            conn.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.01)


def migrate(conn: sqlite3.Connection) -> None:
    """Bring the database to SCHEMA_VERSION, and its search index back if it went missing.
    `conn` is in autocommit mode."""
    if not needs_work(conn):
        return
    use_wal(conn)
    conn.execute("BEGIN IMMEDIATE")
    try:
        version = user_version(conn)  # another process may have migrated meanwhile
        check_not_newer(version)
        for number in range(version + 1, SCHEMA_VERSION + 1):
            for step in MIGRATIONS[number - 1]:
                step(conn) if callable(step) else conn.execute(step)
        if version == SCHEMA_VERSION and not search_index.complete(conn):
            search_index.build(conn)  # dropped by hand (or by a tool): never left missing, so never stale
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
