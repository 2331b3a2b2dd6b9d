"""The attachments of one conversation, sized for one model's context, and what each turn gets.

Sizing, with `usable` = n_ctx minus the reply reserve of the full-context policy:
- attachments go in whole while together they stay within a quarter of `usable`, in the order
  they were attached; a whole file is placed once, in the next user turn, and stays in the
  conversation from there (it is placed again only once that turn has left the context);
- the others are cut into chunks of about 200-400 tokens (smaller when a quarter of `usable`
  is under 800, so that a turn can still take two) and indexed with BM25; each user turn gets
  the best chunks that fit a quarter of `usable` (labels included), less what whole files take
  that turn, skipping chunks still in the context from an earlier turn and text already chosen.
Everything is counted with the caller's token counter: the model's own tokenizer.

One `AttachmentSet` belongs to one conversation on one model; use it from one thread at a
time (the engine's worker). Build a new one, from `attachments`, when the model changes (another
tokenizer); `resized` serves a new n_ctx or reply reserve.

Sizing asks chatapp.engine.retrieval.cancel before each tokenizer call, so a stopped attach ends
between calls and leaves the set as it was. Names in its lines are escaped for the terminal.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from chatapp.engine.retrieval import cancel
from chatapp.engine.retrieval.chunking import MAX_TOKENS, Chunk, chunk_attachment
from chatapp.engine.retrieval.context import EntryKey, RetrievedContext, RetrievedEntry, render
from chatapp.engine.retrieval.document import Attachment
from chatapp.engine.retrieval.index import ChunkIndex
from chatapp.engine.retrieval.loading import load_path
from chatapp.errors import AttachmentError
from chatapp.format import one_line_text

TokenCounter = Callable[[str], int]
SEARCH_LIMIT = 10
"""Chunks considered per turn, best first; the budget usually takes two to four of them."""
MIN_CHUNK_TOKENS = 32


@dataclass(frozen=True)
class Sizing:
    n_ctx: int
    reserve: int
    """Tokens the full-context policy keeps free for the reply."""

    @property
    def usable(self) -> int:
        return max(self.n_ctx - self.reserve, 0)

    @property
    def whole_limit(self) -> int:
        """Tokens that attachments placed whole may take, all together."""
        return self.usable // 4

    @property
    def turn_budget(self) -> int:
        """Tokens one turn's retrieved block may take, labels included."""
        return self.usable // 4

    @property
    def chunk_max(self) -> int:
        """400, or less when a small context could not take two chunks and their labels in a turn."""
        return max(MIN_CHUNK_TOKENS, min(MAX_TOKENS, self.turn_budget // 2))

    @property
    def chunk_min(self) -> int:
        return self.chunk_max // 2


@dataclass(frozen=True)
class Planned:
    """One attachment as this set uses it: whole, or as chunks."""

    attachment: Attachment
    tokens: int
    whole: bool
    chunks: tuple[Chunk, ...]
    """One chunk covering the whole text when `whole`."""


@dataclass(frozen=True)
class AttachReport:
    added: tuple[Planned, ...]
    notices: tuple[str, ...]
    """One line each: encoding fallbacks, skipped files, files that were attached already."""


class AttachmentSet:
    def __init__(self, count_tokens: TokenCounter, n_ctx: int, reserve: int,
                 attachments: Iterable[Attachment] = ()):
        self.count_tokens = count_tokens
        self.sizing = Sizing(n_ctx, reserve)
        self._tokens: dict[str, int] = {}
        self._chunks: dict[tuple[str, int, int], tuple[Chunk, ...]] = {}
        self._plans: tuple[Planned, ...] = self._plan(list(attachments))
        self._index: ChunkIndex | None = None

    def resized(self, n_ctx: int, reserve: int) -> AttachmentSet:
        """The same attachments sized for another context or reply reserve, with the same token
        counter: token counts and chunks already cut are reused (a new max_tokens usually keeps
        the chunk sizes, so this costs no tokenizing)."""
        other = AttachmentSet(self.count_tokens, n_ctx, reserve)
        other._tokens, other._chunks = self._tokens, self._chunks
        other._plans = other._plan(list(self.attachments))
        return other

    # --- what is attached --------------------------------------------------------------
    @property
    def attachments(self) -> tuple[Attachment, ...]:
        return tuple(p.attachment for p in self._plans)

    @property
    def plans(self) -> tuple[Planned, ...]:
        return self._plans

    def attach(self, path: str | Path) -> AttachReport:
        """Add a file or a folder. All or nothing: on AttachmentError the set is unchanged."""
        loaded = load_path(path)
        return self.add(loaded.attachments, loaded.notices)

    def add(self, attachments: Iterable[Attachment], notices: Iterable[str] = ()) -> AttachReport:
        """Add attachments already read (e.g. restored from a session). All or nothing."""
        notices = list(notices)
        current = list(self.attachments)
        names = {a.name for a in current}
        shas = {a.sha256 for a in current}
        new = []
        for attachment in attachments:
            if attachment.sha256 in shas:
                notices.append(f"{one_line_text(attachment.name)} is attached already")
                continue
            if attachment.name in names:
                raise AttachmentError(f"an attachment named {one_line_text(attachment.name)} is attached already; "
                                      f"remove it first")
            names.add(attachment.name)
            shas.add(attachment.sha256)
            new.append(attachment)
        plans = self._plan(current + new)
        self._plans, self._index = plans, None
        new_shas = {a.sha256 for a in new}
        added = tuple(p for p in plans if p.attachment.sha256 in new_shas)
        return AttachReport(added, tuple(notices))

    def remove(self, name: str) -> Attachment:
        """Detach by name. What earlier turns placed stays in their messages."""
        found = next((a for a in self.attachments if a.name == name), None)
        if found is None:
            raise AttachmentError(f"nothing named {one_line_text(name)} is attached")
        self._plans = self._plan([a for a in self.attachments if a is not found])
        self._index = None
        self._tokens.pop(found.sha256, None)
        for key in [k for k in self._chunks if k[0] == found.sha256]:
            del self._chunks[key]
        return found

    # --- each turn -----------------------------------------------------------------------
    def retrieve(self, question: str, placed: Iterable[EntryKey] = ()) -> RetrievedContext | None:
        """The block to place before `question`, or None when nothing applies.

        `placed` holds the entries still in the context window from earlier turns
        (`context.placed_keys(chat.context_messages())`); they are not placed again.
        """
        placed = set(placed)
        budget = self.sizing.turn_budget
        chosen: list[tuple[RetrievedEntry, str]] = []
        for plan in self._plans:
            entry = _entry(plan.chunks[0], None)
            if plan.whole and entry.key not in placed:
                chosen.append((entry, plan.chunks[0].text))
        fixed = len(chosen)
        cost = self.count_tokens(render(chosen))
        texts = {text for _, text in chosen}
        for scored in self.index().search(question, SEARCH_LIMIT):
            entry = _entry(scored.chunk, scored.score)
            if entry.key in placed or scored.chunk.text in texts:
                continue  # already in the context, or the same text from another file (a licence header)
            extra = entry.tokens + self.count_tokens(entry.label()) + 2
            if cost + extra <= budget:
                chosen.append((entry, scored.chunk.text))
                texts.add(scored.chunk.text)
                cost += extra
        if not chosen:
            return None
        text = render(chosen)
        # Tokens merge across the joins now and then; drop the weakest chunk until it fits.
        while len(chosen) > fixed and self.count_tokens(text) > budget:
            chosen.pop()
            text = render(chosen)
        return RetrievedContext(text, tuple(entry for entry, _ in chosen))

    def index(self) -> ChunkIndex:
        """The BM25 index over every chunked attachment, built on first use after a change."""
        if self._index is None:
            self._index = ChunkIndex([c for p in self._plans if not p.whole for c in p.chunks])
        return self._index

    # --- sizing --------------------------------------------------------------------------
    def _plan(self, attachments: list[Attachment]) -> tuple[Planned, ...]:
        plans, whole_used = [], 0
        for attachment in attachments:
            tokens = self._token_count(attachment)
            whole = tokens <= self.sizing.whole_limit - whole_used
            if whole:
                whole_used += tokens
                chunks = (Chunk(attachment.name, attachment.sha256, "", 1, attachment.line_count,
                                tokens, attachment.text),)
            else:
                chunks = self._chunks_of(attachment)
            plans.append(Planned(attachment, tokens, whole, chunks))
        return tuple(plans)

    def _token_count(self, attachment: Attachment) -> int:
        if attachment.sha256 not in self._tokens:
            cancel.check()
            self._tokens[attachment.sha256] = self.count_tokens(attachment.text)
        return self._tokens[attachment.sha256]

    def _chunks_of(self, attachment: Attachment) -> tuple[Chunk, ...]:
        """Cut once per attachment: removing another one can re-plan this one without re-cutting."""
        key = (attachment.sha256, self.sizing.chunk_min, self.sizing.chunk_max)
        if key not in self._chunks:
            self._chunks[key] = tuple(chunk_attachment(
                attachment, self._stoppable_count, min_tokens=self.sizing.chunk_min, max_tokens=self.sizing.chunk_max))
        return self._chunks[key]


    def _stoppable_count(self, text: str) -> int:
        cancel.check()
        return self.count_tokens(text)


def _entry(chunk: Chunk, score: float | None) -> RetrievedEntry:
    return RetrievedEntry(chunk.file, chunk.sha256, chunk.section, chunk.start_line, chunk.end_line,
                          chunk.tokens, score)
