"""This machine's memory read bandwidth: the ceiling that decode speed runs into.

A decode step reads every weight matrix once (and the KV cache) for a handful of operations per
byte, so on a CPU its speed is bounded by how fast memory streams into the cores. The probe
measures that directly: `threads` threads each take a maximum (numpy's SIMD reduction, which
releases the GIL) over their slice of a buffer several times the size of the last-level caches,
so nearly every byte comes from DRAM; the best of a few passes counts. The figure is what that
many cores can stream from memory, in decimal GB/s, which is the unit tok/s x bytes/token gives.
Use the decode thread count: a single core cannot reach the memory bus's limit on its own.

It takes a few tenths of a second (mostly the kernel mapping the buffer's pages) and is cached
per machine (CPU model, core counts, memory size) and thread count under the cache folder;
`chatapp bench bandwidth` measures again. GPU backends read from their own memory, which this
cannot see: `bandwidth_for` says None (not measured) for them rather than guess.

A chat never waits for the probe: `DecodeBandwidth` gives what is cached, and on a new machine
None ("measuring after this turn") until the backend measures it after its first reply. Run
before a first token, the probe cost 0.1-0.3 s here and 1.1-3.8 s on a loaded machine (issue 36).
Run at the end of that reply, it held the turn's end back as long, and with it a tool call's
approval dialog (181 ms for the first, 18-22 ms after, benchmarks/tools.py --tui): so it runs on
a thread of its own once the reply is out, and the next turn or prefill waits for it rather than
share the cores with it (which would halve both the turn and the figure kept).
"""

from __future__ import annotations

import math
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import psutil

from chatapp import paths
from chatapp.engine.filecache import read_cache_json, write_json
from chatapp.engine.machine.hardware import cpu_name, physical_cores

CACHE_FILE = "memory_bandwidth.json"
FORMAT = 1
MIN_BUFFER = 64 << 20
MAX_BUFFER = 1 << 30
CACHE_MULTIPLE = 4
"""Buffer size over the last-level caches' total: each pass evicts what the last one left."""
PASSES = 5
TIME_LIMIT_S = 0.3
"""Stop after this long even if fewer passes ran (a slow or busy machine)."""


@dataclass(frozen=True)
class Bandwidth:
    gbps: float
    """Best read rate over the passes, 10^9 bytes per second."""
    threads: int
    buffer_bytes: int
    passes: int
    seconds: float
    """Wall time of the whole probe, buffer setup included."""
    cached: bool = False


def last_level_cache_bytes() -> int:
    """The last-level caches these threads can fill: the largest level's distinct instances, summed."""
    base = Path("/sys/devices/system/cpu")
    instances: dict[str, int] = {}
    level_found = 0
    allowed = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else set()
    for cpu in sorted(allowed):
        for index in (base / f"cpu{cpu}" / "cache").glob("index*"):
            try:
                level = int((index / "level").read_text())
                size = _size((index / "size").read_text())
                shared = (index / "shared_cpu_list").read_text().strip()
            except (OSError, ValueError):
                continue
            if level > level_found:
                instances, level_found = {}, level
            if level == level_found:
                instances[shared] = size
    return sum(instances.values()) or 32 << 20  # no sysfs (macOS, containers): a generous guess


def _size(text: str) -> int:
    text = text.strip().upper()
    for suffix, factor in (("K", 1 << 10), ("M", 1 << 20), ("G", 1 << 30)):
        if text.endswith(suffix):
            return int(text[:-1]) * factor
    return int(text)


def buffer_size() -> int:
    wanted = max(MIN_BUFFER, CACHE_MULTIPLE * last_level_cache_bytes())
    return int(min(wanted, MAX_BUFFER, psutil.virtual_memory().available // 8))


def measure(threads: int, buffer_bytes: int | None = None) -> Bandwidth:
    """Run the probe now (a few tenths of a second)."""
    threads = max(1, threads)
    started = time.perf_counter()
    size = (buffer_bytes or buffer_size()) // 8 // threads * threads
    buffer = np.empty(size, dtype=np.float64)
    slices = np.array_split(buffer, threads)
    best = float("inf")
    passes = 0
    with ThreadPoolExecutor(threads) as pool:
        # Each thread writes its own slice first: the pages get mapped (on its NUMA node) before timing.
        list(pool.map(lambda part: part.fill(1.0), slices))
        deadline = time.perf_counter() + TIME_LIMIT_S
        while passes < PASSES and (passes < 2 or time.perf_counter() < deadline):
            start = time.perf_counter()
            list(pool.map(np.max, slices))
            best = min(best, time.perf_counter() - start)
            passes += 1
    return Bandwidth(gbps=buffer.nbytes / best / 1e9, threads=threads, buffer_bytes=buffer.nbytes, passes=passes,
                     seconds=time.perf_counter() - started)


def machine_key() -> str:
    """What the figure belongs to: the CPU model, its core counts and the memory size."""
    return f"{cpu_name()}|{os.cpu_count()} cpus|{physical_cores()} cores|{psutil.virtual_memory().total} bytes"


def _cache_path() -> Path:
    return paths.cache_dir() / CACHE_FILE


def _load() -> dict:
    try:
        data = read_cache_json(_cache_path())
    except (OSError, ValueError):
        return {}
    machines = data.get("machines") if isinstance(data, dict) and data.get("format") == FORMAT else None
    return machines if isinstance(machines, dict) else {}


def cached(threads: int) -> Bandwidth | None:
    """The figure cached for this machine and thread count; None when there is none, or when the
    entry is not one this module wrote (an edited cache is measured again, never trusted)."""
    machine = _load().get(machine_key())
    entry = machine.get(str(threads)) if isinstance(machine, dict) else None
    try:
        found = Bandwidth(**{**entry, "cached": True}) if isinstance(entry, dict) else None
    except TypeError:
        return None
    return found if found is not None and _sane(found) else None


def _sane(found: Bandwidth) -> bool:
    """Every figure a positive, finite number, as `measure` gives them."""
    figures = (found.gbps, found.threads, found.buffer_bytes, found.passes, found.seconds)
    return all(isinstance(v, (int, float)) and not isinstance(v, bool) and 0 < v < math.inf for v in figures)


def remember(result: Bandwidth) -> None:
    """Best effort: a cache that cannot be written only means measuring again next time."""
    machines = _load()
    machine = machines.get(machine_key())
    machines[machine_key()] = {**(machine if isinstance(machine, dict) else {}), str(result.threads): {
        k: v for k, v in asdict(result).items() if k != "cached"}}
    write_json(_cache_path(), {"format": FORMAT, "machines": machines})


def memory_bandwidth(threads: int | None = None, *, refresh: bool = False) -> Bandwidth:
    """The cached figure for this machine and thread count, measured first if there is none."""
    threads = threads or physical_cores()
    if not refresh and (found := cached(threads)) is not None:
        return found
    result = measure(threads)
    remember(result)
    return result


def bandwidth_for(backend: str, threads: int | None = None) -> Bandwidth | None:
    """The figure a backend's decode runs against: measured for CPU, None (not measured) for GPUs."""
    return memory_bandwidth(threads) if backend == "CPU" else None


MEASURING = "measuring after this turn (the first on this machine at this thread count)"
"""Why a CPU backend's figure is None: not cached yet, and measured once the turn has ended."""


class DecodeBandwidth:
    """The figure one backend's decode runs against, never measured on the way to a first token:
    the cached one for this machine and thread count, else None until `measure_if_missing` (a
    backend calls it after a turn's reply). On a GPU backend None for good."""

    def __init__(self, backend: str, threads: int) -> None:
        self.backend = backend
        self.threads = max(1, threads)
        self._found: Bandwidth | None = None
        self._looked = False
        self._probe: threading.Thread | None = None

    @property
    def gbps(self) -> float | None:
        if not self._looked:  # once: decode asks for it at every token
            self._looked = True
            self._found = cached(self.threads) if self.backend == "CPU" else None
        return self._found.gbps if self._found is not None else None

    @property
    def note(self) -> str:
        """Why `gbps` is None while it is to be measured (MEASURING); "" once measured, and on a
        GPU, whose figure is never measured (the UI names the backend instead)."""
        return MEASURING if self.backend == "CPU" and self.gbps is None else ""

    def measure_if_missing(self) -> None:
        """The probe, when nothing is cached (a few tenths of a second); its figure is kept."""
        if self.note:
            self._found = memory_bandwidth(self.threads)

    def measure_later(self) -> None:
        """`measure_if_missing` on a thread of its own (see the module); `wait` joins it."""
        if self.note and self._probe is None:
            self._probe = threading.Thread(target=self._measure, name="chatapp-bandwidth-probe", daemon=True)
            self._probe.start()

    def _measure(self) -> None:
        try:
            self.measure_if_missing()
        except (OSError, MemoryError, ValueError):  # no figure (the panels say so); the chat goes on
            pass

    def wait(self) -> None:
        """Until a probe started by `measure_later` has ended (at once when none runs)."""
        probe = self._probe
        if probe is not None:
            probe.join()
            self._probe = None
