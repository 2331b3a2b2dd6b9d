"""A draft policy that verifies every draft it has, so drafting is exercised on every step."""

from __future__ import annotations

from chatapp.engine.drafting.policy import DraftPolicy


class AlwaysDraft(DraftPolicy):
    """Verify every draft the drafter has, up to k_max: the chain is then exercised every step."""

    def choose(self, match, available, reply=None):
        return min(available, self.k_max)
