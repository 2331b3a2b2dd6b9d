"""Full-text search over every saved message of every branch (the FTS5 index of
chatapp.engine.sessions.search_index): hits with their context, newest first, each naming the
reply to check out so that the session opens on the hit's branch.

Newest first is the index's own rowid order, read backwards: a message's rowid is the one it
was written under, and SQLite gives each new row one above the largest, so that order is the
order saved in. FTS5 walks its lists backwards for `ORDER BY rowid DESC` and stops at the
limit, so a word that matches half of 200,000 messages costs no more than a rare one
(benchmarks/search.py: both well under 50 ms), where ordering by a time column would have to
read every match first.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass

from chatapp.engine.chat.tree import is_id
from chatapp.engine.sessions.rows import RowReader
from chatapp.engine.sessions.search_index import TABLE
from chatapp.engine.sessions.store import SessionStore
from chatapp.errors import InputError

OPEN, CLOSE = "\x02", "\x03"
"""What FTS5's snippet() puts around each matched word: characters chatapp never writes, taken
out again to make `Hit.parts`, so a match is marked however the text is shown."""
_QUERY_ERRORS = ("fts5:", "unterminated string", "no such column", "unknown special query")
"""How SQLite begins the errors that come from a query FTS5 can't parse, rather than from the database."""
CONTEXT_WORDS = 16
"""The words of context a hit's snippet shows around its matches."""
FIELDS = ("text", "thought", "file")
"""What of a message a hit matched, in the index's column order (search_index: body, thinking,
files): its text, its thought, or the name of a file its retrieved block quoted."""


class SearchQueryError(InputError):
    """The query is not one FTS5 can read (an unclosed quote, a bare AND)."""

    title = "Search"


@dataclass(frozen=True)
class Hit:
    session: str
    message_id: str
    role: str
    parts: tuple[tuple[str, bool], ...]
    """The snippet: text around the matches, as (text, is a match) pieces in order."""
    created_at: float
    """When the message was first saved."""
    leaf: str | None
    """The reply to check out to open the session on this message's branch: the newest reply at
    the end of a path through the message (None for a question with no reply before or after it)."""
    active: bool
    """The message is on the session's active path (the branch shown when it opens)."""
    field: str = "text"
    """What of the message matched (FIELDS): the snippet is from there."""

    @property
    def where(self) -> str:
        """Where it matched, as a hit's line says it: "" for the message's text, " · in its thought",
        " · in a file's name"."""
        return {"thought": " · in its thought", "file": " · in a file's name"}.get(self.field, "")

    @property
    def snippet(self) -> str:
        return "".join(text for text, _ in self.parts)


def search(store: SessionStore, query: str, limit: int = 20) -> list[Hit]:
    """The messages that match `query` (FTS5's syntax: words, "a phrase", prefix*, AND, OR,
    NOT, NEAR), newest first, at most `limit`. SearchQueryError for a query FTS5 can't read."""
    if not query.strip():
        raise SearchQueryError("the search query is empty")
    if not store.readable():
        return []
    with store.reading() as conn:
        try:
            rows = conn.execute(
                "SELECT m.session_id, s.name, m.id, m.role, m.created_at,"
                + "".join(f" snippet({TABLE}, {column}, ?1, ?2, '…', ?3)," for column in range(len(FIELDS)))
                + f" snippet({TABLE}, -1, ?1, ?2, '…', ?3) FROM {TABLE} f"
                f" JOIN messages m ON m.rowid = f.rowid JOIN sessions s ON s.id = m.session_id"
                f" WHERE {TABLE} MATCH ?4 ORDER BY f.rowid DESC LIMIT ?5",
                (OPEN, CLOSE, CONTEXT_WORDS, query, max(limit, 0))).fetchall()
        except sqlite3.OperationalError as exc:
            if not str(exc).startswith(_QUERY_ERRORS):
                raise
            raise SearchQueryError(f"cannot search for {query!r}: {exc} (put words in double quotes to find "
                                   "them as written)") from None
        trees = {session_id: _tree(conn, session_id) for session_id in {row[0] for row in rows}}
    read = RowReader()
    hits = []
    for session_id, name, message_id, role, created_at, *snippets in rows:
        if not is_id(message_id):
            continue  # an id edited away: nothing could open it
        parents, order, active = trees[session_id]
        # the text's own snippet where the text matched, else the thought's, the file names' (a
        # column the query did not match gives its opening words, unmarked); FTS5's pick otherwise
        marked = [f for f, text in zip(FIELDS, snippets) if isinstance(text, str) and OPEN in text]
        field = marked[0] if marked else FIELDS[0]
        snippet = snippets[FIELDS.index(field)] if marked else snippets[-1]
        hits.append(Hit(read.text(name, "name", "(unreadable name)"), message_id, read.text(role, "role", "user"),
                        _parts(read.text(snippet, "snippet")), read.number(created_at, "created"),
                        _leaf_through(message_id, parents, order), message_id in active, field))
    return hits


Tree = tuple[dict[str, str | None], dict[str, tuple[int, str]], set[str]]


def _tree(conn: sqlite3.Connection, session_id: int) -> Tree:
    """A session's messages as parent links, each one's (rowid, role), and its active path's ids."""
    parents: dict[str, str | None] = {}
    order: dict[str, tuple[int, str]] = {}
    for rowid, message_id, parent, role in conn.execute(
            "SELECT rowid, id, parent, role FROM messages WHERE session_id = ? AND role != 'system'", (session_id,)):
        if is_id(message_id):
            parents[message_id] = parent if is_id(parent) else None
            order[message_id] = (rowid, role if isinstance(role, str) else "")
    (leaf,) = conn.execute("SELECT active_leaf FROM sessions WHERE id = ?", (session_id,)).fetchone()
    active: set[str] = set()
    node = leaf if is_id(leaf) else None
    while node is not None and node not in active:  # a loop (an edited parent) ends the walk
        active.add(node)
        node = parents.get(node)
    return parents, order, active


def _leaf_through(message_id: str, parents: dict[str, str | None], order: dict[str, tuple[int, str]]) -> str | None:
    """The newest reply at the end of a path through `message_id`: down its newest children to a
    leaf, then back to the last reply on the way (a question left unanswered ends no branch)."""
    children: dict[str, list[str]] = {}
    for child, parent in parents.items():
        if parent is not None:
            children.setdefault(parent, []).append(child)
    path, node, seen = [message_id], message_id, {message_id}
    while kids := [kid for kid in children.get(node, ()) if kid not in seen]:
        node = max(kids, key=lambda kid: order[kid][0])
        path.append(node)
        seen.add(node)
    node = parents.get(message_id)
    while node is not None and node not in seen:  # above the hit, for a question nothing answered yet
        path.insert(0, node)
        seen.add(node)
        node = parents.get(node)
    return next((mid for mid in reversed(path) if order[mid][1] == "assistant"), None)


def _parts(snippet: str) -> tuple[tuple[str, bool], ...]:
    parts = []
    for i, piece in enumerate(snippet.split(OPEN)):
        matched, _, rest = piece.partition(CLOSE) if i else ("", "", piece)
        parts += [(text, is_match) for text, is_match in ((matched, True), (rest, False)) if text]
    return tuple(parts)
