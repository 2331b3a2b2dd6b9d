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
from chatapp.engine.retrieval.context import RetrievedContext
from chatapp.engine.retrieval.document import Attachment
from chatapp.errors import AttachmentError


def context_json(message: Message) -> str | None:
    return None if message.context is None else json.dumps(message.context.to_record(), ensure_ascii=False)


def read_messages(conn: sqlite3.Connection, session_id: int) -> tuple[list[Message], list[str]]:
    """The session's messages in order, with their retrieved blocks; notices for blocks that
    could not be read (that message then renders without one: the KV check will say so)."""
    messages, notices = [], []
    for idx, role, content, stopped, raw in conn.execute(
            "SELECT idx, role, content, stopped, context FROM messages WHERE session_id = ? ORDER BY idx",
            (session_id,)):
        context = None
        if raw is not None:
            try:
                context = RetrievedContext.from_record(json.loads(raw))
            except (ValueError, KeyError, TypeError):
                notices.append(f"the attachment text placed in message {idx} could not be read; left out")
        messages.append(Message(role, content, bool(stopped), context))
    return messages, notices


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
    dropped because its text does not match its sha256 (or its row is damaged)."""
    attachments, notices = [], []
    for name, kind, sha256, page_starts, text in conn.execute(
            "SELECT name, kind, sha256, page_starts, text FROM attachments WHERE session_id = ? ORDER BY idx",
            (session_id,)):
        try:
            record = {"name": name, "kind": kind, "sha256": sha256, "page_starts": json.loads(page_starts),
                      "text": text}
            attachments.append(Attachment.from_record(record))
        except AttachmentError as exc:
            notices.append(f"attachment dropped: {exc}")
        except (ValueError, TypeError):
            notices.append(f"attachment dropped: {name}: its saved record is damaged")
    return attachments, notices
