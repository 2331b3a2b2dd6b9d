"""The full-text index over every saved message (SQLite FTS5), kept in step by triggers.

One FTS5 row per message of every branch of every session, under the message's own rowid:
its text (`body`: a question, a reply, a tool's call or result), its thought (`thinking`)
and the names of the files its retrieved block quoted (`files`). Triggers on `messages`
write it in the transaction that writes the message, so the index is never stale: a save
that commits has indexed, a save killed half-way has done neither, and a deleted branch's
rows (or a deleted session's, by the foreign key's cascade) leave the index with them.

Why triggers rather than code beside each write: every path that touches `messages` (a save,
a migration, a repair, a hand edit in the sqlite3 shell) keeps the index, with nothing to
remember. Why a table that holds its own copy of the text, not an external-content one: a
row edited by hand into another value could never be deleted from an external-content index
(FTS5 deletes by the old text), which would leave it stale for good; the copy costs the text
once more on disk. The system prompt is left out: it is outside the tree, and a word in it
would match every session that uses it. An incognito chat is never written to the database,
so it is never indexed.
"""

from __future__ import annotations

import sqlite3

TABLE = "message_text"
TRIGGERS = ("message_text_insert", "message_text_update", "message_text_delete")

_FILES = ("CASE WHEN json_valid({m}.context) THEN (SELECT group_concat(json_extract(e.value, '$.file'), ' ')"
          " FROM json_each({m}.context, '$.entries') e WHERE e.type = 'object') END")
"""The file names a message's retrieved block (its `context`, RetrievedContext's JSON) quoted;
NULL for a block edited into something else, which then costs its names, not the save."""

_ROW = "rowid, body, thinking, files"
_VALUES = "{m}.rowid, {m}.content, {m}.thinking, " + _FILES

CREATE: tuple[str, ...] = (
    f"CREATE VIRTUAL TABLE {TABLE} USING fts5(body, thinking, files, tokenize = 'unicode61 remove_diacritics 2')",
    f"""CREATE TRIGGER message_text_insert AFTER INSERT ON messages WHEN new.role != 'system' BEGIN
        INSERT INTO {TABLE} ({_ROW}) VALUES ({_VALUES.format(m="new")});
    END""",
    # Only a change to what is indexed costs anything: a save rewrites each message's parent and
    # flags (chatapp.engine.sessions.store._apply), and re-indexing those would be the whole cost
    f"""CREATE TRIGGER message_text_update AFTER UPDATE OF role, content, thinking, context ON messages
        WHEN old.role IS NOT new.role OR old.content IS NOT new.content OR old.thinking IS NOT new.thinking
          OR old.context IS NOT new.context BEGIN
        DELETE FROM {TABLE} WHERE rowid = old.rowid;
        INSERT INTO {TABLE} ({_ROW}) SELECT {_VALUES.format(m="new")} WHERE new.role != 'system';
    END""",
    f"""CREATE TRIGGER message_text_delete AFTER DELETE ON messages BEGIN
        DELETE FROM {TABLE} WHERE rowid = old.rowid;
    END""",
)


def build(conn: sqlite3.Connection) -> None:
    """Create the index and its triggers, and index every message already saved (schema 8's
    migration, and the repair of a database whose index was dropped). Inside a transaction."""
    conn.execute(f"DROP TABLE IF EXISTS {TABLE}")
    for trigger in TRIGGERS:
        conn.execute(f"DROP TRIGGER IF EXISTS {trigger}")
    for statement in CREATE:
        conn.execute(statement)
    conn.execute(f"INSERT INTO {TABLE} ({_ROW}) SELECT {_VALUES.format(m='m')} FROM messages m"
                 " WHERE m.role != 'system'")


def complete(conn: sqlite3.Connection) -> bool:
    """Whether the index and all three of its triggers are in the database."""
    names = {name for (name,) in conn.execute(
        "SELECT name FROM sqlite_master WHERE name IN (?, ?, ?, ?)", (TABLE, *TRIGGERS))}
    return names == {TABLE, *TRIGGERS}
