"""An attachment's text and identity, as kept in memory and in a saved session."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from chatapp.errors import AttachmentError
from chatapp.format import one_line_text

KINDS = ("text", "pdf")


@dataclass(frozen=True)
class Attachment:
    name: str
    """What the user and the model see: the file name, or its path inside an attached folder."""
    text: str
    """The text the model may be given, with "\\n" line endings; line numbers count in it."""
    sha256: str
    """Of `text` as UTF-8: it identifies what the model can see, so a saved session proves it
    retrieves from the same text (a PDF's bytes would not say that)."""
    kind: str = "text"
    page_starts: tuple[int, ...] = ()
    """For a PDF, the 1-based line of `text` where each page begins."""

    @classmethod
    def from_text(cls, name: str, text: str, *, kind: str = "text", page_starts: tuple[int, ...] = ()) -> Attachment:
        return cls(name, text, text_sha256(text), kind, tuple(page_starts))

    @property
    def line_count(self) -> int:
        return self.text.count("\n") + (0 if self.text.endswith("\n") else 1)

    def page_of_line(self, line: int) -> int | None:
        """The 1-based page a line of a PDF's text is on; None for other files."""
        if not self.page_starts:
            return None
        return sum(1 for start in self.page_starts if start <= line) or 1

    def to_record(self) -> dict:
        """A JSON-ready form for the sessions database."""
        return {"name": self.name, "kind": self.kind, "sha256": self.sha256,
                "page_starts": list(self.page_starts), "text": self.text}

    @classmethod
    def from_record(cls, record: dict) -> Attachment:
        """The inverse of to_record; refuses a record whose text no longer matches its hash."""
        text = record["text"]
        if text_sha256(text) != record["sha256"]:
            raise AttachmentError(f"{one_line_text(str(record['name']))}: the saved text does not match its sha256")
        kind = record.get("kind", "text")
        if kind not in KINDS:
            raise AttachmentError(f"{one_line_text(str(record['name']))}: unknown attachment kind {kind!r}")
        return cls(record["name"], text, record["sha256"], kind, tuple(record.get("page_starts", ())))


def text_sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()
