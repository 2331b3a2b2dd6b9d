"""Per-turn figures, taken from llama.cpp's own counters where llama.cpp keeps them."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace

from chatapp.engine.sampling import TokenProbs


def rate(tokens: int, ms: float) -> float:
    return tokens * 1000.0 / ms if ms > 0 else 0.0


DRAFT_KEYS = ("draft", "draft_tokens", "draft_accepted", "decode_steps")
"""A turn record's drafting figures (`extra`): the mode that ran, tokens drafted and accepted,
and llama_decode calls while decoding. `ask --json` and the sessions journal carry them."""
ROOFLINE_KEYS = ("decode_bytes_per_token", "decode_gbps", "memory_bandwidth_gbps")
"""A turn record's memory-traffic figures (chatapp.engine.machine.roofline.record_figures)."""


@dataclass(frozen=True)
class DraftFigures:
    """A turn's speculative decoding so far (chatapp.engine.drafting.speculative.DraftStats, frozen)."""

    steps: int
    """Decode steps: one llama_decode each."""
    tokens: int
    """Tokens the steps added to the cache."""
    drafted: int
    accepted: int
    by_position: tuple[tuple[int, int], ...]
    """(accepted, drafted) per draft position: 1st, 2nd, ..."""
    decode_ms: float
    """Wall time of the steps."""
    baseline_ms: float | None
    """What plain one-token steps would have taken for the same tokens, at their measured time
    (None when no plain step had been timed before a verify step)."""

    @property
    def acceptance(self) -> float:
        return self.accepted / self.drafted if self.drafted else 0.0

    @property
    def tokens_per_step(self) -> float:
        return self.tokens / self.steps if self.steps else 0.0

    @property
    def speedup(self) -> float:
        """Against this turn's non-speculative estimate."""
        return self.baseline_ms / self.decode_ms if self.baseline_ms and self.decode_ms > 0 else 0.0

    def record(self) -> dict:
        """The turn record's drafting keys (see DRAFT_KEYS), and the detail behind them."""
        return {"draft": "ngram", "draft_tokens": self.drafted, "draft_accepted": self.accepted,
                "decode_steps": self.steps, "draft_by_position": [list(p) for p in self.by_position],
                "draft_baseline_ms": None if self.baseline_ms is None else round(self.baseline_ms, 3),
                "draft_speedup": round(self.speedup, 3) if self.speedup else None,
                "timing": "wall clock"}


@dataclass(frozen=True)
class LiveDecode:
    """Decode progress while a reply streams."""

    decode_tokens: int
    decode_ms: float
    kv_used: int
    threads: int = 0
    """llama.cpp threads decoding now (0: the backend does not say)."""
    threads_reason: str = ""
    bytes_per_token: int = 0
    """What decoding a token reads now: the weights it uses and the KV cells in use (0: unknown)."""
    bandwidth_gbps: float | None = None
    """This machine's measured memory read bandwidth (None: not measured, e.g. a GPU's)."""
    bandwidth_note: str = ""
    """Why `bandwidth_gbps` is None when it is still to be measured (after this turn)."""
    draft: DraftFigures | None = None
    """The turn's drafting so far; None when the turn does not draft."""

    @property
    def decode_tps(self) -> float:
        return rate(self.decode_tokens, self.decode_ms)


@dataclass(frozen=True)
class TurnRecord:
    reply: str
    prompt_tokens: int
    """The whole templated prompt, as the model saw it this turn."""
    cached_tokens: int
    """Prompt tokens whose KV entries were in the cache when the turn started (at Enter): from
    the turns before, and those prefilled while the question was typed."""
    prefill_tokens: int
    """Prompt tokens prefilled after the turn started."""
    prefill_ms: float
    ttft_ms: float
    """From when the question was sent (Enter in the TUI) to the first text of the reply."""
    decode_tokens: int
    decode_ms: float
    generated_tokens: int
    kv_used: int
    n_ctx: int
    kv_bytes_per_token: int
    dropped_turns: int = 0
    finish_reason: str = "stop"
    """stop (end of turn), length (max tokens), context (cache full) or stopped (by the user)."""
    reuse_broken_at: int | None = None
    """First prompt position that differed from what was cached, when reuse fell short."""
    restored_tokens: int = 0
    restore_ms: float = 0.0
    prefilled_while_typing: int = 0
    """Of `cached_tokens`, those prefilled while the question was being typed
    (chatapp.engine.chat.typeahead)."""
    extra: dict = field(default_factory=dict)
    probs: tuple[TokenProbs, ...] = ()
    """Each sampled reply token's sampling step, when the turn asked for them; `to_json`
    writes them as "logprobs"."""
    thinking: str = ""
    """A thinking model's thought, apart from `reply` (its answer)."""
    thinking_tokens: int = 0
    """Decoded tokens up to and including the thought's closing marker."""
    thinking_ms: float = 0.0
    """Decode time of those tokens."""
    reprefill_expected: int | None = None
    """Prompt tokens predicted, before the turn, to be prefilled again because the template
    rewrote the history (dropped earlier thoughts); None when nothing could be predicted."""

    @property
    def answer_tokens(self) -> int:
        return max(0, self.decode_tokens - self.thinking_tokens)

    @property
    def answer_ms(self) -> float:
        return max(0.0, self.decode_ms - self.thinking_ms)

    @property
    def prefill_tps(self) -> float:
        return rate(self.prefill_tokens, self.prefill_ms)

    @property
    def decode_tps(self) -> float:
        return rate(self.decode_tokens, self.decode_ms)

    @property
    def kv_bytes_used(self) -> int:
        return self.kv_used * self.kv_bytes_per_token

    def to_json(self) -> dict:
        data = asdict(replace(self, probs=()))
        data.pop("probs")
        extra = data.pop("extra")
        data["prefill_tps"] = round(self.prefill_tps, 2)
        data["decode_tps"] = round(self.decode_tps, 2)
        for key in ("prefill_ms", "decode_ms", "ttft_ms", "restore_ms", "thinking_ms"):
            data[key] = round(data[key], 3)
        data.update(extra)
        if self.probs:
            data["logprobs"] = [p.to_json() for p in self.probs]
        return data


def draft_figures(record: TurnRecord) -> DraftFigures | None:
    """A drafted turn's figures from its record (see DraftFigures.record); None for a turn that
    did not draft, or a record from before drafting existed."""
    extra = record.extra
    try:
        if extra.get("draft") != "ngram":
            return None
        by_position = tuple((int(a), int(d)) for a, d in extra["draft_by_position"])
        return DraftFigures(int(extra["decode_steps"]), record.decode_tokens, int(extra["draft_tokens"]),
                            int(extra["draft_accepted"]), by_position, record.decode_ms,
                            None if extra["draft_baseline_ms"] is None else float(extra["draft_baseline_ms"]))
    except (KeyError, TypeError, ValueError):
        return None
