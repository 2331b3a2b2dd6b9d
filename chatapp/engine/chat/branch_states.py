"""KV states kept per branch leaf, so switching branches restores a cache instead of
prefilling the branch again.

None of llama.cpp's WebUI, Open WebUI or the TUIs that keep conversation trees keeps a KV
state per branch: they lean on the server's prefix cache, which re-prefills a branch's whole
tail on every switch back. `Engine` stashes the cache of the leaf it leaves here (memory, least
recently used evicted past `branch_state_mb`), and a saved session's `BranchKeeper` keeps them
on disk too. A state is only ever used after its tokens are checked against the target path's
prompt, so a stale one costs a prefill, never a wrong reply.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Literal, Protocol

from chatapp.engine.backend import CacheState

SwitchHow = Literal["restored", "kept", "empty"]


class BranchKeeper(Protocol):
    """Where branch states live beyond memory (a saved session's state files)."""

    def keep_branch(self, leaf: str, state: CacheState) -> None:
        """A leaf's state as the engine left it; may be written later (after the turn)."""

    def load_branch(self, leaf: str) -> CacheState | None:
        """The leaf's kept state, checked against this model (fingerprint, finite values), or None."""

    def kept_branches(self) -> list[str]:
        """The leaves with a state kept beyond memory (without reading them)."""

    def drop_branches(self, leaves: set[str]) -> None:
        """Forget the states of these messages (a deleted branch): none is written, and the save
        that deletes the branch removes their files."""


def state_bytes(state: CacheState) -> int:
    return len(state.payload)


class BranchStates:
    """Leaf id -> its cache state, in memory, within a byte budget (least recently used go first).
    States kept by a server (slot files) cost no memory here and count as one byte each."""

    def __init__(self, budget_bytes: int) -> None:
        self.budget_bytes = budget_bytes
        self._states: OrderedDict[str, CacheState] = OrderedDict()

    def __contains__(self, leaf: object) -> bool:
        return leaf in self._states

    def __len__(self) -> int:
        return len(self._states)

    @property
    def used_bytes(self) -> int:
        return sum(max(1, state_bytes(s)) for s in self._states.values())

    def put(self, leaf: str, state: CacheState) -> list[str]:
        """Keep `state` for `leaf`; returns the leaves evicted to stay in budget (maybe this one)."""
        self._states[leaf] = state
        self._states.move_to_end(leaf)
        evicted = []
        while self._states and self.used_bytes > self.budget_bytes:
            gone, _ = self._states.popitem(last=False)
            evicted.append(gone)
        return evicted

    def leaves(self) -> list[str]:
        """The leaves with a state kept, least recently used first."""
        return list(self._states)

    def get(self, leaf: str) -> CacheState | None:
        state = self._states.get(leaf)
        if state is not None:
            self._states.move_to_end(leaf)
        return state

    def discard(self, leaves: set[str]) -> None:
        for leaf in leaves:
            self._states.pop(leaf, None)

    def clear(self) -> None:
        self._states.clear()


@dataclass(frozen=True)
class BranchFigures:
    """The shown branch's cache in one set of figures: what every panel, notice and the tree
    say of it, so that no two of them count it differently."""

    leaf: str | None
    tokens: int
    """The branch's tokens: its path's prompt (the context window's part) as the next turn
    starts with it, without the generation prompt. The tree counts each leaf the same way."""
    cached: int
    """Of those, the ones the cache holds now (their common prefix with it)."""
    cells: int
    """Cells the cache holds: `cached`, and anything past it that the next turn will overwrite."""
    n_ctx: int
    reprefill: int = 0
    """Of the cells the cache holds for this branch, those the next turn prefills again because
    the template rewrites the history (a thinking model's template drops earlier thoughts)."""
    reprefill_at: int | None = None
    """The cache position where that starts (the break the next turn will meet); None when 0."""
    reprefill_reason: str = ""
    """Why, in words: "the template drops earlier thoughts"."""

    @property
    def to_prefill(self) -> int:
        """The branch's tokens the next turn still prefills before its question."""
        return self.tokens - self.cached


@dataclass(frozen=True)
class BranchSwitch:
    """What a switch of branch did to the cache, for the KV and Tokens panels."""

    leaf: str | None
    position: int
    """1-based place among its siblings of the deepest message on the new path that has any."""
    siblings: int
    how: SwitchHow
    """restored: the target leaf's kept state is loaded; kept: the cache keeps what it shares
    with the target path and the next turn prefills the rest; empty: nothing to keep."""
    figures: BranchFigures
    """The branch after the switch: its tokens, and how many of them the cache now holds."""
    ms: float
    source: str = ""
    """Where a restored state came from: memory or disk."""
    estimate_s: float | None = None
    """What prefilling the branch again would take at this machine's measured speed."""

    @property
    def tokens(self) -> int:
        """restored: tokens loaded; kept: tokens shared with the target path."""
        return self.figures.cached

    @property
    def prefill_next(self) -> int:
        """Tokens of the target path the next turn still prefills before its question."""
        return self.figures.to_prefill

    def describe(self) -> str:
        where = f"branch {self.position}/{self.siblings} ({self.figures.tokens:,} tokens)"
        rest = f"; the next turn prefills {self.prefill_next:,}" if self.prefill_next else ""
        if self.how == "restored":
            estimate = f" (re-prefill ~{self.estimate_s:,.1f} s)" if self.estimate_s else ""
            return (f"restored {where}: {self.tokens:,} in {self.ms:,.0f} ms from {self.source}{estimate}"
                    f"{rest}")
        if self.how == "kept":
            return f"switched to {where}: kept {self.tokens:,} in common{rest}"
        return f"switched to {where}: no cached tokens shared; the next turn prefills {self.prefill_next:,}"
