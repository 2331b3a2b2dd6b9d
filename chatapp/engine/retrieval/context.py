"""What one user turn placed in the prompt from its attachments, and how it reads to the model.

The block goes inside the user's message, before the question, so that the conversation before
it stays a reusable cache prefix: only the new turn pays for it. A user message that carries a
`RetrievedContext` is sent to the template as `context.text + question` (see
`Message.as_template_input`); storing the context with the message is what lets a saved
session reproduce, token for token, the prompt the model saw.

Stdlib and chatapp.format only: `chatapp.engine.events` imports this module.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from chatapp.format import one_line_text

INTRO = ("Excerpts from the attached files follow, each under its source label. "
         "Answer from them where they help, and cite the labels you used.\n\n")
QUESTION = "Question:\n"

EntryKey = tuple[str, int, int]
"""(attachment sha256, start_line, end_line): names a chunk independently of the file's name."""


@dataclass(frozen=True)
class RetrievedEntry:
    file: str
    sha256: str
    section: str
    start_line: int
    end_line: int
    tokens: int
    """The entry's own text, counted with the model's tokenizer (its label not included)."""
    score: float | None
    """BM25 score; None for a whole small file, which is placed without retrieval."""

    @property
    def whole(self) -> bool:
        return self.score is None

    @property
    def key(self) -> EntryKey:
        return (self.sha256, self.start_line, self.end_line)

    def label(self) -> str:
        """`[README.md, lines 10-42, "Installation"]`, or `[notes.txt, whole file]`. The name and
        the heading come from outside (a file name, a line of the file) and the label is shown
        in the transcript and on stderr as well as to the model, so their control characters
        are escaped: one line, and no escape sequence reaches the terminal."""
        name = one_line_text(self.file)
        if self.whole:
            return f"[{name}, whole file]"
        lines = f"line {self.start_line}" if self.start_line == self.end_line else \
            f"lines {self.start_line}-{self.end_line}"
        section = f', "{one_line_text(self.section).replace(chr(34), chr(39))}"' if self.section else ""
        return f"[{name}, {lines}{section}]"

    def to_json(self) -> dict:
        """The `retrieved` entry of `ask --json`."""
        score = None if self.score is None else round(self.score, 4)
        return {"file": self.file, "start_line": self.start_line, "end_line": self.end_line,
                "tokens": self.tokens, "score": score}

    def to_record(self) -> dict:
        return {**self.to_json(), "score": self.score, "sha256": self.sha256, "section": self.section}

    @classmethod
    def from_record(cls, record: dict) -> RetrievedEntry:
        return cls(record["file"], record["sha256"], record["section"], record["start_line"],
                   record["end_line"], record["tokens"], record["score"])


@dataclass(frozen=True)
class RetrievedContext:
    """The block placed before one question: its exact text and what it holds."""

    text: str
    entries: tuple[RetrievedEntry, ...]

    @property
    def span(self) -> tuple[int, int]:
        """Where the block lies in the message content the template receives: its start."""
        return (0, len(self.text))

    def to_json(self) -> list[dict]:
        return [entry.to_json() for entry in self.entries]

    def to_record(self) -> dict:
        """A JSON-ready form for the sessions database (one column next to the message)."""
        return {"text": self.text, "entries": [entry.to_record() for entry in self.entries]}

    @classmethod
    def from_record(cls, record: dict) -> RetrievedContext:
        return cls(record["text"], tuple(RetrievedEntry.from_record(e) for e in record["entries"]))


def render(placed: Iterable[tuple[RetrievedEntry, str]]) -> str:
    """The block for (entry, text) pairs: an intro, each text under its label, then "Question:"."""
    parts = [INTRO]
    for entry, text in placed:
        parts.append(f"{entry.label()}\n{text.strip(chr(10))}\n\n")
    parts.append(QUESTION)
    return "".join(parts)


def message_content(question: str, context: RetrievedContext | None) -> tuple[str, tuple[int, int] | None]:
    """The content the template gets for a user turn, and the retrieved block's span in it."""
    if context is None:
        return question, None
    return context.text + question, context.span


def placed_keys(messages: Iterable) -> set[EntryKey]:
    """Entries already in the conversation: every `context` carried by these messages."""
    return {entry.key for message in messages if getattr(message, "context", None)
            for entry in message.context.entries}


def prompt_spans(prompt: str, messages: Iterable) -> list[tuple[int, int]]:
    """Character ranges of each message's retrieved block in the templated prompt, in order.

    `prompt` is the chat template's rendering of `messages` (what the Tokens panel shows).
    """
    spans, start = [], 0
    for message in messages:
        context = getattr(message, "context", None)
        if context is None:
            continue
        at = prompt.find(context.text + message.content, start)
        if at < 0:
            continue
        spans.append((at, at + len(context.text)))
        start = at + len(context.text)
    return spans


def tokens_within(pieces: Iterable[str], spans: list[tuple[int, int]], offset: int = 0) -> list[bool]:
    """For each token (by its text piece), whether it starts inside one of `spans`.

    `offset` is the prompt position of the first piece (negative when the tokenizer added a BOS
    that the rendered text lacks, as in `prompt_view.build`). The count of True is the
    "retrieved" segment of the KV panel; the mask is the Tokens panel's "retrieved" origin.
    """
    mask, pos = [], offset
    for piece in pieces:
        mask.append(any(start <= pos < end for start, end in spans))
        pos += len(piece)
    return mask
