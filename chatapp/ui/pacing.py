"""Keep costly screen updates within a share of the UI thread's CPU.

Every reply update lays out the whole screen, and the UI thread's CPU is CPU the decode
thread may wait for (the GIL). Most of the time an update is cheap and all of them go
through; when the screen is slow to lay out (a long transcript, a huge reply, a small
machine) the reply's text is shown less often instead of decode slowing down. The panels
repaint without a layout and are not paced; the final text always lands with TurnFinished.
"""

from __future__ import annotations

import time
from collections.abc import Callable

REPLY_CPU_BUDGET = 0.3
"""Share of one core the UI thread may spend, on average, between two reply updates. A turn
on an empty screen takes about 22% in all, so normally every update goes through."""


class UpdatePacer:
    """After an update, the next is due once `spent / budget` seconds have passed, where
    `spent` is the CPU the calling thread used since that update (the update's own layout
    and paint included). Call `due()` and `mark()` from the UI thread."""

    def __init__(self, budget: float = REPLY_CPU_BUDGET, *, clock: Callable[[], float] = time.monotonic,
                 cpu_clock: Callable[[], float] = time.thread_time) -> None:
        self.budget = budget
        self._clock, self._cpu_clock = clock, cpu_clock
        self._last: tuple[float, float] | None = None

    def due(self) -> bool:
        if self._last is None:
            return True
        at, cpu = self._last
        return self._clock() - at >= (self._cpu_clock() - cpu) / self.budget

    def mark(self) -> None:
        self._last = (self._clock(), self._cpu_clock())

    def reset(self) -> None:
        self._last = None
