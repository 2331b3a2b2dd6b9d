"""How many threads llama.cpp gets: measured on this machine, and fewer when it is busy.

llama.cpp's OpenMP threads wait for each other by spinning. When one of them is descheduled
because another program wants a core, the others spin until it comes back, at every one of
the hundreds of barriers in a token: on 2 cores, 2 threads beside one busy process decoded at
0.3 tok/s where 1 thread kept about 40. So the count follows what other programs leave free
(psutil's CPU counters, sampled while a turn runs), and within that:
- prefill gets every free physical core (the UI is idle while it runs);
- decode gets the count that measured fastest here. The first decode steps on a model try
  each candidate in turn, in short blocks, and keep the fastest by median step time; the
  choice is cached per machine and model, so later starts begin with it.
- Under load, decode's back-off is measured too. A core that other programs keep at least
  SURE_SHARE busy is taken (two threads beside a busy loop waited on each other at every
  barrier: 0.3 tok/s). Between BUSY_SHARE and that, what it costs depends on the load (the
  terminal drawing chatapp's screen is such a load: in a tmux window 2 of 6 decode pairs ran
  on one thread at 0.85x of llama-cli): the decode steps then time both counts under the load
  at hand, as the first steps do on a quiet machine, and keep the faster for as long as the
  load stays in that band (rechecked every RECHECK_S). A step of the larger count that takes
  GIVE_UP times the smaller's ends the trial at once.
`reason` says, in words, what runs and why (the Speed panel shows it).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from pathlib import Path

import psutil

from chatapp import paths
from chatapp.engine.filecache import read_cache_json, write_json

BLOCK = 4
"""Decode steps per candidate in one round of the first measurement."""
ROUNDS = 3
"""Rounds of blocks (each candidate gets ROUNDS x BLOCK steps) before choosing."""
LOAD_EVERY_S = 0.5
"""Seconds between looks at what other programs use."""
BUSY_SHARE = 0.5
"""A core counts as taken (for prefill, and maybe for decode) when other programs use at least
this share of one."""
SURE_SHARE = 0.9
"""A core counts as taken for decode, without measuring, when other programs use at least this share of one."""
RECHECK_S = 30.0
"""Seconds a count measured under one band of load is kept before it is measured again."""
GIVE_UP = 3.0
"""A trial step of the larger count this many times slower than the smaller's median ends the trial."""
CACHE_FILE = "decode_threads.json"


class OtherLoad:
    """Cores that other programs keep busy: the whole machine's busy time less this process's."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._process = psutil.Process()
        self._last = self._read()

    def _read(self) -> tuple[float, float, float]:
        total = psutil.cpu_times()
        busy = sum(getattr(total, name, 0.0) for name in ("user", "nice", "system", "irq", "softirq", "steal"))
        mine = sum(self._process.cpu_times()[:2])
        return self._clock(), busy, mine

    def sample(self) -> float:
        """Cores used by others since the last sample (0 when too little time has passed)."""
        now = self._read()
        wall = now[0] - self._last[0]
        if wall <= 0:
            return 0.0
        others = max(0.0, (now[1] - self._last[1]) - (now[2] - self._last[2])) / wall
        self._last = now
        return others


def _cache_path() -> Path:
    return paths.cache_dir() / CACHE_FILE


def _load() -> dict:
    try:
        data = read_cache_json(_cache_path())
    except (OSError, ValueError):  # none yet, or damaged: measured again
        return {}
    return data if isinstance(data, dict) else {}


def cached_choice(key: str) -> int | None:
    value = _load().get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def remember_choice(key: str, threads: int) -> None:
    """Best effort: a cache that can't be written only means measuring again next time."""
    path, data = _cache_path(), _load()
    write_json(path, {**(data if isinstance(data, dict) else {}), key: threads})


class ThreadPolicy:
    def __init__(self, cores: int, *, fixed: int = 0, key: str = "", load: OtherLoad | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.cores = max(1, cores)
        self.fixed = fixed
        self._key = key
        self._load = load or OtherLoad(clock)
        self._clock = clock
        self._free = self.cores
        self.others = 0.0
        """Cores other programs used at the last look."""
        self._looked = clock()
        self._candidates = sorted({1, max(1, self.cores - 1), self.cores})
        self._steps: dict[int, list[float]] = {n: [] for n in self._candidates}
        self.best = fixed or (cached_choice(key) if key else None)
        self._plan = [] if self.best else [n for _ in range(ROUNDS) for n in self._candidates for _ in range(BLOCK)]
        self._sure_free = self.cores
        self._pair: tuple[int, int] | None = None
        """(fewer, more) decode threads to choose between under the load at hand; None when the load decides alone."""
        self._trial: list[int] = []
        self._trial_steps: dict[int, list[float]] = {}
        self._loaded: dict[tuple[int, int], tuple[int, float, dict[int, float]]] = {}
        """Per pair: the faster count measured, when, and each count's median step time."""

    # --- what other programs leave --------------------------------------------------------
    def look(self, force: bool = False) -> None:
        """Update the free cores from what other programs used since the last look."""
        now = self._clock()
        if not force and now - self._looked < LOAD_EVERY_S:
            return
        self._looked = now
        others = self.others = self._load.sample()
        self._free = max(1, self.cores - int(others + (1 - BUSY_SHARE)))
        self._sure_free = max(1, self.cores - int(others + (1 - SURE_SHARE)))
        self._weigh_load(now)

    def _weigh_load(self, now: float) -> None:
        """Start timing both counts when the load leaves a choice that has not been measured lately."""
        if self.fixed or self._plan:
            return
        more = min(self.best or self.cores, self._sure_free)
        fewer = min(more, self._free)
        pair = (fewer, more) if fewer < more else None
        if pair == self._pair and (self._trial or pair is None):
            return
        self._pair = pair
        self._trial = []
        known = self._loaded.get(pair) if pair else None
        if pair is None or (known is not None and now - known[1] < RECHECK_S):
            return
        self._trial = [n for _ in range(ROUNDS) for n in pair for _ in range(BLOCK)]
        self._trial_steps = {n: [] for n in pair}

    @property
    def free(self) -> int:
        return self._free

    # --- choices -----------------------------------------------------------------------------
    def prefill_threads(self) -> int:
        return self.fixed or self._free

    def decode_threads(self) -> int:
        if self.fixed:
            return self.fixed
        if self._plan:
            return min(self._plan[0], self._free)
        if self._trial:
            return self._trial[0]
        if self._pair is not None:
            known = self._loaded.get(self._pair)
            return known[0] if known is not None else self._pair[0]
        return min(self.best or self.cores, self._free)

    @property
    def measuring(self) -> bool:
        return (bool(self._plan) or bool(self._trial)) and not self.fixed

    def observe(self, threads: int, seconds: float) -> None:
        """A decode step ran with `threads` in `seconds`."""
        if self._trial and not self._plan:
            self._observe_trial(threads, seconds)
            return
        if not self._plan:
            return
        if threads == self._plan[0] and threads <= self._free:
            self._steps[threads].append(seconds)
        self._plan.pop(0)
        if not self._plan:
            medians = {n: statistics.median(s) for n, s in self._steps.items() if s}
            if medians:
                self.best = min(medians, key=medians.get)
                self._medians = medians
                if self._key and len(medians) == len(self._candidates):
                    remember_choice(self._key, self.best)

    def _observe_trial(self, threads: int, seconds: float) -> None:
        fewer, more = self._pair or (threads, threads)
        if threads != self._trial[0]:
            return
        steps = self._trial_steps
        steps[threads].append(seconds)
        self._trial.pop(0)
        gave_up = threads == more and steps[fewer] and seconds > GIVE_UP * statistics.median(steps[fewer])
        if self._trial and not gave_up:
            return
        self._trial = []
        medians = {n: statistics.median(s) for n, s in steps.items() if s}
        choice = fewer if gave_up else min(medians, key=medians.get)
        self._loaded[(fewer, more)] = (choice, self._clock(), medians)

    def reason(self, threads: int) -> str:
        """Why `threads` run now, in a few words."""
        if self.fixed:
            return "set in the config"
        if self._trial:
            return f"measuring {self._pair[0]} and {self._pair[1]} threads under the load here"
        known = self._loaded.get(self._pair) if self._pair else None
        if known is not None and threads == known[0]:
            shown = ", ".join(f"{n}: {known[2][n] * 1000:.1f} ms" for n in sorted(known[2]))
            return (f"fastest measured under the load here (other programs use {self.others:.1f} cores; "
                    f"per token {shown})")
        if self._free < self.cores and threads == self._free:
            taken = self.cores - self._free
            return f"other programs keep {taken} of {self.cores} cores busy"
        if self._plan:
            return "measuring which count is fastest here"
        medians = getattr(self, "_medians", None)
        if medians and len(medians) > 1:
            shown = ", ".join(f"{n}: {medians[n] * 1000:.1f} ms" for n in sorted(medians))
            return f"fastest measured here (per token {shown})"
        return "fastest measured here earlier" if self.best else "all physical cores"
