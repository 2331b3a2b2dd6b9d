"""One typed reader for what sessions.db holds.

SQLite keeps whatever a column is given (its types are affinities, not rules), so a database
edited with the sqlite3 shell can hold a BLOB where chatapp writes text, text where it writes
a number, or JSON of another shape. Every value the store reads back passes through here and
comes out with the type chatapp wrote, or as a stand-in plus a notice that says what was
wrong. Nothing later meets a wrong type, so a damaged row is never a traceback and the rest
of the session still opens:

- a message whose role or content can't be read is kept in its place as an "unreadable"
  stand-in (so the indices of the rows after it, and the row itself, are saved back as
  they are);
- an attachment or a retrieved block that can't be read is left out;
- a number that can't be read counts as 0 (a revision of 0 is simply older than any save).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

from chatapp.engine.chat.tree import is_id
from chatapp.engine.events import Message
from chatapp.engine.retrieval.context import RetrievedContext, RetrievedEntry
from chatapp.engine.sessions.image_rows import read_images_column
from chatapp.format import one_line_text

ROLES = ("system", "user", "assistant", "tool")
"""A "tool" message holds a tool's result in a tool loop (chatapp.engine.chat.tool_turns)."""
_ENTRY_FIELDS = {"file": str, "sha256": str, "section": str, "start_line": int, "end_line": int, "tokens": int}


class Unreadable(ValueError):
    """A value is not what chatapp writes there; the message says what it is instead."""


def kind_of(value: object) -> str:
    """What a value read from SQLite is, in a few words: "a 2-byte BLOB", "an integer"."""
    if value is None:
        return "NULL"
    if isinstance(value, (bytes, bytearray, memoryview)):
        return f"a {len(value):,}-byte BLOB"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a real number"
    if isinstance(value, str):
        return f"the text {one_line_text(value[:40])!r}" + ("…" if len(value) > 40 else "")
    return f"a JSON {type(value).__name__}"


def text(value: object, what: str) -> str:
    if not isinstance(value, str):
        raise Unreadable(f"{what} is {kind_of(value)}, not text")
    return value


def integer(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise Unreadable(f"{what} is {kind_of(value)}, not a whole number")
    return value


def number(value: object, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise Unreadable(f"{what} is {kind_of(value)}, not a number")
    return float(value)


class RowReader:
    """Reads one session's rows, collecting a notice for each value it had to stand in for."""

    def __init__(self) -> None:
        self.notices: list[str] = []

    def text(self, value: object, what: str, default: str = "") -> str:
        try:
            return text(value, what)
        except Unreadable as exc:
            self.notices.append(f"{exc}; read as {default!r}")
            return default

    def integer(self, value: object, what: str, default: int = 0) -> int:
        try:
            return integer(value, what)
        except Unreadable as exc:
            self.notices.append(f"{exc}; read as {default}")
            return default

    def number(self, value: object, what: str, default: float = 0.0) -> float:
        try:
            return number(value, what)
        except Unreadable as exc:
            self.notices.append(f"{exc}; read as {default:g}")
            return default

    def message(self, idx: int, role: object, content: object, stopped: object, context: object,
                message_id: object = None, parent: object = None, thinking: object = "",
                images: object = "") -> Message:
        """One messages row. Unreadable role or content: a stand-in that says so, in its place. An
        id or parent that is not one chatapp writes is dropped (the tree places the message after
        the one before it, chatapp.engine.chat.tree)."""
        tree_id = message_id if is_id(message_id) else ""
        tree_parent = parent if is_id(parent) else None
        try:
            role = text(role, f"the role of message {idx}")
            if role not in ROLES:
                raise Unreadable(f"the role of message {idx} is {kind_of(role)}, not one of {', '.join(ROLES)}")
            content = text(content, f"the content of message {idx}")
        except Unreadable as exc:
            self.notices.append(f"{exc}; shown as unreadable")
            return Message(role if role in ROLES else "user", f"[unreadable message: {exc}]",
                           id=tree_id, parent=tree_parent)
        block = None
        if context is not None:
            try:
                block = retrieved_context(context)
            except Unreadable as exc:
                self.notices.append(f"the attachment text placed in message {idx} could not be read ({exc}); "
                                    "left out")
        shas, notice = read_images_column(images)
        if notice:
            self.notices.append(f"message {idx}: {notice}")
        return Message(role, content, self.integer(stopped, f"the stopped flag of message {idx}") != 0, block,
                       id=tree_id, parent=tree_parent,
                       thinking=self.text(thinking, f"the thought of message {idx}") if thinking else "",
                       images=shas)


def retrieved_context(raw: object) -> RetrievedContext:
    """A messages.context value: the JSON of RetrievedContext.to_record(), checked field by field."""
    raw = text(raw, "it")
    try:
        record = json.loads(raw)
    except (ValueError, RecursionError):
        raise Unreadable("it is not valid JSON") from None
    if not isinstance(record, dict) or not isinstance(record.get("entries"), list):
        raise Unreadable("it has no list of entries")
    block = text(record.get("text"), "its text")
    entries = []
    for entry in record["entries"]:
        if not isinstance(entry, dict):
            raise Unreadable(f"an entry is {kind_of(entry)}")
        for name, kind in _ENTRY_FIELDS.items():
            (text if kind is str else integer)(entry.get(name), f"an entry's {name}")
        score = entry.get("score")
        if score is not None:
            number(score, "an entry's score")
        entries.append(RetrievedEntry(*(entry[name] for name in _ENTRY_FIELDS), score))
    return RetrievedContext(block, tuple(entries))


@dataclass(frozen=True)
class SessionRow:
    """A sessions row as chatapp wrote it."""

    id: int
    name: str
    state_key: str
    """As stored: it names a file only once `names.valid_state_key` accepts it."""
    model: str
    model_path: str
    model_sha256: str
    quant: str
    system_prompt: str
    window_start: int
    kv_tokens: int
    created_at: float
    updated_at: float
    revision: int


SESSION_COLUMNS = ("id, name, state_key, model, model_path, model_sha256, quant, system_prompt, window_start,"
                   " kv_tokens, created_at, updated_at, revision")
"""What `session_row` reads, in its order."""


def session_row(reader: RowReader, row: tuple) -> SessionRow:
    (id_, name, key, model, path, sha, quant, system, window, kv, created, updated, revision) = row
    return SessionRow(
        id_, reader.text(name, "the session's name", "(unreadable name)"), reader.text(key, "its state key"),
        reader.text(model, "its model's name", "unknown"), reader.text(path, "its model's path"),
        reader.text(sha, "its model's identity"), reader.text(quant, "its model's quant", "unknown"),
        reader.text(system, "its system prompt"), reader.integer(window, "its window start"),
        reader.integer(kv, "its cached-token count"), reader.number(created, "its creation time"),
        reader.number(updated, "its last-save time"), reader.integer(revision, "its revision"))
