"""What the KV cache holds, in the conversation's terms: whose path it is, what the last turn
reused and left there, and how fast the last long prefill ran. Shared by the engine and its
collaborators, so each reads one record instead of asking the others."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class CacheTrack:
    leaf: str | None = None
    """The leaf whose path the cache holds, when it holds one (after its turn or a restore)."""
    kept_as_is: str | None = None
    """The leaf whose kept state in memory is the cache as it is now (no turn since)."""
    last_reuse: int | None = None
    """How much cached prefix the last turn reused: regenerate reuses no more, so that it
    prefills the same tokens as one batch again and a greedy reply comes out the same."""
    last_turn: tuple[list[int], int] | None = None
    """The last turn's cache ids and where its reply starts in them, for `attention`; None when
    the conversation or the cache changed since (a new chat, a session opened, cleared)."""
    prefill_tps: float | None = None
    """The last long prefill's speed, for what re-prefilling a branch would cost."""

    def forget(self) -> None:
        """The cache follows no path any more (cleared, another conversation, a new chat)."""
        self.leaf = self.kept_as_is = None
        self.last_reuse = self.last_turn = None
