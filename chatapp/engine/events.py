"""What a turn reports while it runs. Consumers (CLI, TUI) iterate over these.

A backend streams PrefillProgress, PrefillDone and TextDelta, then ends with a Generated;
the engine passes the first three on (a thinking model's reply split into ThoughtDelta and
TextDelta), turns the Generated into a TurnDone with the turn's
record and its token view, reports ContextTrimmed when it had to drop old turns, and
ContextRetrieved when it placed attachment text before the question.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from chatapp.engine.images import with_markers
from chatapp.engine.retrieval.context import RetrievedContext, message_content
from chatapp.engine.sampling import TokenProbs
from chatapp.engine.stats import LiveDecode, TurnRecord
from chatapp.engine.tokens import Token


@dataclass(frozen=True)
class Message:
    role: str
    content: str
    stopped: bool = False
    context: RetrievedContext | None = None
    """Attachment text placed before `content` in this user turn, exactly as the model saw it."""
    id: str = field(default="", compare=False)
    """The message's stable short id in its conversation tree ("" until the tree takes it in);
    left out of equality, so two messages compare by what the model sees."""
    parent: str | None = field(default=None, compare=False)
    """The id of the message it follows; None for a conversation's first question (and the
    system prompt, which is not in the tree)."""
    thinking: str = ""
    """A reply's thought, apart from its answer (`content`), as generated (chatapp.engine.thinking)."""
    images: tuple[str, ...] = ()
    """A question's images by content hash, in order (chatapp.engine.images): each is a media
    marker before the text, which a backend that sees images reads as the image's cells."""

    def as_template_input(self) -> dict[str, str]:
        content = message_content(self.content, self.context)[0]
        data = {"role": self.role, "content": with_markers(content, self.images) if self.images else content}
        if self.thinking:  # templates that read it (Qwen3's) place it; the others leave it out
            data["reasoning_content"] = self.thinking
        return data


@dataclass(frozen=True)
class PromptToken:
    """One token of the prompt as the model saw it: its role and where it came from
    (chatapp.engine.chat.prompt_view builds them; `TurnDone.view` carries them)."""

    token: Token
    role: str
    origin: str
    """cached (reused from the KV cache), prefilled (computed this turn) or generated."""
    drafted: bool = False
    """A generated token that came from an accepted draft (speculative decoding)."""


@dataclass(frozen=True)
class ContextTrimmed:
    """The full-context policy dropped the oldest whole turns to make this one fit."""

    dropped: tuple[Message, ...]
    dropped_turns: int
    prompt_tokens_before: int
    prompt_tokens_after: int


@dataclass(frozen=True)
class ContextRetrieved:
    """What this turn placed before the question from the attachments, before prefill starts
    (the same block the user message keeps as its `context`)."""

    context: RetrievedContext


@dataclass(frozen=True)
class PrefillProgress:
    """Prefill runs in chunks; one of these follows each chunk."""

    done: int
    """Prompt tokens computed so far this turn (the reused prefix not counted)."""
    total: int
    """Prompt tokens this turn computes in all."""
    elapsed_ms: float
    threads: int = 0

    @property
    def tps(self) -> float:
        return self.done * 1000.0 / self.elapsed_ms if self.elapsed_ms > 0 else 0.0

    @property
    def remaining_s(self) -> float | None:
        """Time left at the speed so far; None before the first chunk."""
        rate = self.tps
        return (self.total - self.done) / rate if rate > 0 else None


@dataclass(frozen=True)
class PrefillDone:
    prompt_tokens: int
    cached_tokens: int
    prefill_tokens: int
    prefill_ms: float
    reuse_broken_at: int | None
    flops_per_token: int = 0
    """About 2 x the active parameters: the compute a prompt token costs (0: unknown)."""

    @property
    def prefill_tps(self) -> float:
        return self.prefill_tokens * 1000.0 / self.prefill_ms if self.prefill_ms > 0 else 0.0


@dataclass(frozen=True)
class TextDelta:
    text: str
    live: LiveDecode


@dataclass(frozen=True)
class ThoughtDelta:
    """A piece of the reply's thought (the engine splits it from the answer, which goes on
    as TextDelta; chatapp.engine.thinking)."""

    text: str
    live: LiveDecode


@dataclass(frozen=True)
class Generated:
    """How a backend's turn ended: the last event of `Backend.stream`."""

    finish_reason: str
    """stop, length, context or stopped (see TurnRecord.finish_reason)."""
    reply: str
    generated_tokens: int
    decode_tokens: int
    decode_ms: float
    kv_used: int
    prefill: PrefillDone | None = None
    """None only when the turn was stopped before its prefill finished."""
    extra: dict = field(default_factory=dict)
    """Backend-specific figures for the record (threads, the server's timings, ...)."""
    drafted: tuple[int, ...] = ()
    """Indexes of the reply's tokens (0: its first) that were accepted drafts."""
    probs: tuple[TokenProbs, ...] = ()
    """Each sampled reply token's sampling step, in order, when the turn asked for them
    (GenerationSettings.logprobs); forced tokens have none."""
    forced: int = 0
    """Reply tokens given rather than sampled (Backend.stream's `forced`); they start the reply."""
    forced_prefilled: int = 0
    """How many of those the turn computed (the rest were in the cache)."""


class TurnDone:
    """The turn's record, and the prompt as the model saw it (built on first use, on the
    thread that asks: the CLI never needs it, the TUI builds it on its worker thread)."""

    def __init__(self, record: TurnRecord, view: Callable[[], list[PromptToken]] | None = None) -> None:
        self.record = record
        self._build_view = view
        self._view: list[PromptToken] | None = None

    @property
    def view(self) -> list[PromptToken]:
        if self._view is None:
            self._view = self._build_view() if self._build_view is not None else []
        return self._view


BackendEvent = PrefillProgress | PrefillDone | TextDelta | Generated
Event = ContextTrimmed | ContextRetrieved | PrefillProgress | PrefillDone | ThoughtDelta | TextDelta | TurnDone
