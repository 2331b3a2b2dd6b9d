"""What a saved session keeps of its attachments: each file's text and sha256 (table
`attachments`), and each user message's retrieved block (column `messages.context`, the JSON of
`RetrievedContext.to_record()`).

With both, a resumed session retrieves from the same text as before, and its transcript renders
exactly the prompt the model saw, so the saved KV state still matches it token for token. A
file whose text no longer matches its sha256 is dropped with a notice; the conversation stays.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence

from chatapp.engine.events import Message
from chatapp.engine.retrieval.document import Attachment
from chatapp.engine.sessions.rows import RowReader, Unreadable, integer, kind_of, text
from chatapp.errors import AttachmentError


def context_json(message: Message) -> str | None:
    return None if message.context is None else json.dumps(message.context.to_record(), ensure_ascii=False)


def read_messages(conn: sqlite3.Connection, session_id: int) -> tuple[list[Message], list[str]]:
    """The session's messages in the order written (each with its tree id and parent), with
    their retrieved blocks, read through the typed
    reader (chatapp.engine.sessions.rows); notices for what could not be read (a block left
    out renders without it: the KV check will say so)."""
    reader = RowReader()
    messages = [reader.message(idx, role, content, stopped, raw, message_id, parent, thinking, images)
                for idx, role, content, stopped, raw, message_id, parent, thinking, images in conn.execute(
                    "SELECT idx, role, content, stopped, context, id, parent, thinking, images FROM messages"
                    " WHERE session_id = ? ORDER BY idx", (session_id,))]
    return messages, reader.notices


def write_attachments(conn: sqlite3.Connection, session_id: int, attachments: Sequence[Attachment]) -> None:
    """Keep these attachments for the session; rewritten only when the list changed (a file's
    text can be megabytes, and every turn saves)."""
    stored = [sha for (sha,) in conn.execute(
        "SELECT sha256 FROM attachments WHERE session_id = ? ORDER BY idx", (session_id,))]
    if stored == [a.sha256 for a in attachments]:
        return
    conn.execute("DELETE FROM attachments WHERE session_id = ?", (session_id,))
    conn.executemany(
        "INSERT INTO attachments (session_id, idx, name, kind, sha256, page_starts, text) VALUES (?,?,?,?,?,?,?)",
        [(session_id, i, a.name, a.kind, a.sha256, json.dumps(list(a.page_starts)), a.text)
         for i, a in enumerate(attachments)])


def read_attachments(conn: sqlite3.Connection, session_id: int) -> tuple[list[Attachment], list[str]]:
    """The session's attachments, in the order they were attached, and a notice for each one
    dropped because its text does not match its sha256 or a value in its row can't be read."""
    attachments, notices = [], []
    for idx, name, kind, sha256, page_starts, body in conn.execute(
            "SELECT idx, name, kind, sha256, page_starts, text FROM attachments WHERE session_id = ? ORDER BY idx",
            (session_id,)):
        label = name if isinstance(name, str) else f"attachment {idx}"
        try:
            record = {"name": text(name, "its name"), "kind": text(kind, "its kind"),
                      "sha256": text(sha256, "its sha256"), "page_starts": _page_starts(page_starts),
                      "text": text(body, "its saved text")}
            attachments.append(Attachment.from_record(record))
        except AttachmentError as exc:
            notices.append(f"attachment dropped: {exc}")
        except Unreadable as exc:
            notices.append(f"attachment dropped: {label}: {exc}")
    return attachments, notices


def _page_starts(raw: object) -> list[int]:
    raw = text(raw, "its page list")
    try:
        starts = json.loads(raw)
    except (ValueError, RecursionError):
        raise Unreadable("its page list is not valid JSON") from None
    if not isinstance(starts, list):
        raise Unreadable(f"its page list is {kind_of(starts)}")
    return [integer(start, "a page start") for start in starts]
