"""What a turn reports while it runs. Consumers (CLI, TUI) iterate over these."""

from __future__ import annotations

from dataclasses import dataclass

from chatapp.engine.retrieval.context import RetrievedContext, message_content
from chatapp.engine.stats import LiveDecode, TurnRecord


@dataclass(frozen=True)
class Message:
    role: str
    content: str
    stopped: bool = False
    context: RetrievedContext | None = None
    """Attachment text placed before `content` in this user turn, exactly as the model saw it."""

    def as_template_input(self) -> dict[str, str]:
        return {"role": self.role, "content": message_content(self.content, self.context)[0]}


@dataclass(frozen=True)
class ContextTrimmed:
    """The full-context policy dropped the oldest whole turns to make this one fit."""

    dropped: tuple[Message, ...]
    dropped_turns: int
    prompt_tokens_before: int
    prompt_tokens_after: int


@dataclass(frozen=True)
class PrefillDone:
    prompt_tokens: int
    cached_tokens: int
    prefill_tokens: int
    prefill_ms: float
    reuse_broken_at: int | None

    @property
    def prefill_tps(self) -> float:
        return self.prefill_tokens * 1000.0 / self.prefill_ms if self.prefill_ms > 0 else 0.0


@dataclass(frozen=True)
class TextDelta:
    text: str
    live: LiveDecode


@dataclass(frozen=True)
class TurnDone:
    record: TurnRecord


Event = ContextTrimmed | PrefillDone | TextDelta | TurnDone
