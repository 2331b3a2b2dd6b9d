"""KV-cache arithmetic for the panels: how full the cache is and how many more turns fit."""

from __future__ import annotations

from collections.abc import Sequence

WARN_AT = 0.80
CRITICAL_AT = 0.95


def fill(kv_used: int, n_ctx: int) -> float:
    """The fraction of the cache's cells in use, 0.0 to 1.0."""
    return min(max(kv_used, 0) / n_ctx, 1.0) if n_ctx > 0 else 0.0


def pressure(kv_used: int, n_ctx: int) -> str:
    """"ok", "warn" (at least 80% full) or "critical" (at least 95% full)."""
    used = fill(kv_used, n_ctx)
    if used >= CRITICAL_AT:
        return "critical"
    if used >= WARN_AT:
        return "warn"
    return "ok"


def turn_growth(kv_used: int, cached_tokens: int, once: int = 0) -> int:
    """Cells a turn wrote that a next turn writes again: everything in the cache after it beyond
    the prefix it reused, less `once` cells a conversation writes only once (its system prompt and
    tool schemas, on its first turn). Counted in, 2,153 tokens of tool schemas made a first turn of
    2,444 cells read "room for ~0 more turns" with 1,652 cells free for turns of ~290."""
    return max(kv_used - cached_tokens - once, 0)


def forecast_turns(kv_used: int, n_ctx: int, recent_turn_growths: Sequence[int]) -> int | None:
    """How many more turns of the recent turns' average size fit in the free cells.

    None when there is no history to go on (or the recent turns wrote nothing).
    """
    growths = [g for g in recent_turn_growths if g > 0]
    if not growths:
        return None
    free = max(n_ctx - kv_used, 0)
    average = sum(growths) / len(growths)
    return int(free // average)
