"""Stop strings for a reply: text after which the reply ends, never shown.

A base model's reply ends where it opens the next turn of the fallback format
(chatapp.engine.models.base_model.FALLBACK_STOPS). Text that may be the start of a stop string
is held back until the next pieces say whether it is; what comes before a stop string is given
out, the stop string and anything after it never.
"""

from __future__ import annotations

from collections.abc import Sequence


class StopText:
    def __init__(self, stops: Sequence[str]) -> None:
        self.stops = tuple(s for s in stops if s)
        self._held = ""
        self.stopped = False

    def feed(self, text: str) -> str:
        """What of `text` (after what was held) may be shown now; sets `stopped` at a stop string."""
        if not self.stops or self.stopped:
            return "" if self.stopped else text
        held = self._held + text
        found = [i for i in (held.find(s) for s in self.stops) if i >= 0]
        if found:
            self.stopped, self._held = True, ""
            return held[:min(found)]
        keep = max((n for s in self.stops for n in range(1, len(s)) if held.endswith(s[:n])), default=0)
        self._held = held[len(held) - keep:] if keep else ""
        return held[:len(held) - keep]

    def flush(self) -> str:
        """At the reply's end: what was held back (it never became a stop string)."""
        held, self._held = self._held, ""
        return "" if self.stopped else held
