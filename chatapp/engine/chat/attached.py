"""The conversation's attachments: files read and sized for this model's context, and the
block of them that best answers each question (chatapp.engine.retrieval)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from chatapp.engine.events import Message
from chatapp.engine.retrieval.attachments import AttachmentSet, AttachReport, Planned
from chatapp.engine.retrieval.context import RetrievedContext, placed_keys
from chatapp.engine.retrieval.document import Attachment


class Attached:
    def __init__(self, count_tokens: Callable[[str], int], n_ctx: Callable[[], int],
                 reserve: Callable[[], int]) -> None:
        self._count_tokens = count_tokens
        self._n_ctx = n_ctx
        self._reserve = reserve
        self.current: AttachmentSet | None = None
        """Created on the first attach; sized again for n_ctx and max_tokens before each use."""

    @property
    def plans(self) -> tuple[Planned, ...]:
        return self.current.plans if self.current is not None else ()

    def attach(self, path: str | Path) -> AttachReport:
        return self._sized().attach(path)

    def add(self, attachments: Iterable[Attachment], notices: Iterable[str] = ()) -> AttachReport:
        return self._sized().add(attachments, notices)

    def detach(self, name: str) -> Attachment:
        if self.current is None:  # says "nothing named"
            return AttachmentSet(self._count_tokens, self._n_ctx(), self._reserve()).remove(name)
        return self.current.remove(name)

    def replace(self, attachments: Iterable[Attachment]) -> None:
        attachments = list(attachments)
        self.current = AttachmentSet(self._count_tokens, self._n_ctx(), self._reserve(), attachments) \
            if attachments else None

    def forget(self) -> None:
        self.current = None

    def retrieve(self, question: str, earlier: Sequence[Message]) -> RetrievedContext | None:
        """The block for this question from the attachments, leaving out what `earlier` (the
        messages still in the window) already placed."""
        if self.current is None or not self.current.plans:
            return None
        return self._sized().retrieve(question, placed_keys(earlier))

    def _sized(self) -> AttachmentSet:
        n_ctx, reserve, current = self._n_ctx(), self._reserve(), self.current
        if current is None:
            self.current = AttachmentSet(self._count_tokens, n_ctx, reserve)
        elif (current.sizing.n_ctx, current.sizing.reserve) != (n_ctx, reserve):
            self.current = current.resized(n_ctx, reserve)
        return self.current
