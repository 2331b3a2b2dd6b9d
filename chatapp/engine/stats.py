"""Per-turn figures, taken from llama.cpp's own counters where llama.cpp keeps them."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field


def rate(tokens: int, ms: float) -> float:
    return tokens * 1000.0 / ms if ms > 0 else 0.0


@dataclass(frozen=True)
class LiveDecode:
    """Decode progress while a reply streams."""

    decode_tokens: int
    decode_ms: float
    kv_used: int
    threads: int = 0
    """llama.cpp threads decoding now (0: the backend does not say)."""
    threads_reason: str = ""

    @property
    def decode_tps(self) -> float:
        return rate(self.decode_tokens, self.decode_ms)


@dataclass(frozen=True)
class TurnRecord:
    reply: str
    prompt_tokens: int
    """The whole templated prompt, as the model saw it this turn."""
    cached_tokens: int
    """Prompt tokens whose KV entries were reused from the previous turn."""
    prefill_tokens: int
    prefill_ms: float
    ttft_ms: float
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
    extra: dict = field(default_factory=dict)

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
        data = asdict(self)
        extra = data.pop("extra")
        data["prefill_tps"] = round(self.prefill_tps, 2)
        data["decode_tps"] = round(self.decode_tps, 2)
        for key in ("prefill_ms", "decode_ms", "ttft_ms", "restore_ms"):
            data[key] = round(data[key], 3)
        data.update(extra)
        return data
