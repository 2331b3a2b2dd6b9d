"""End a stretch of Python code in the calling thread once it has used so much CPU time.

    with cpu_limit(1.0):      # raises CPULimitExceeded inside the block after 1 s of CPU
        text = template.render(...)

One watchdog thread, started on first use, sleeps until the earliest deadline of the blocks
being watched; when a block's thread has spent its CPU time (its own CPU clock, so waiting
for the GIL does not count) the watchdog raises CPULimitExceeded in that thread with
`PyThreadState_SetAsyncExc`. The exception arrives between two bytecodes, so the work stops
where it is: no thread is left spinning, the way one would be if the work ran in a thread that
is given up on. A single long C call (a huge `str * int`) finishes first; callers bound those
separately.

Why not `sys.settrace`: tracing slows every Python call in the block. On the default model's
chat template (10 messages) a render took 21 us bare, 87 to 143 us traced, and 24 us under
this watchdog (see chatapp.engine.models.template).
"""

from __future__ import annotations

import contextlib
import ctypes
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass


class CPULimitExceeded(BaseException):
    """Raised in a block that used up its CPU time. A BaseException, so that code inside the
    block catching `Exception` cannot swallow it."""


def _thread_clock() -> int | None:
    """The calling thread's CPU-time clock, or None where the platform has none to share."""
    try:
        return time.pthread_getcpuclockid(threading.get_ident())
    except (AttributeError, OSError):
        return None


def _set_async_exc(thread_id: int, exc: type[BaseException] | None) -> None:
    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread_id), ctypes.py_object(exc) if exc else None)


@dataclass(eq=False)
class _Watch:
    thread_id: int
    clock: int | None
    limit_s: float
    started: float
    check_at: float
    fired: bool = False

    def spent(self) -> float:
        now = time.clock_gettime(self.clock) if self.clock is not None else time.monotonic()
        return now - self.started


class _Watchdog:
    def __init__(self):
        self._cond = threading.Condition()
        self._watches: set[_Watch] = set()
        self._wake_at: float | None = None
        self._thread: threading.Thread | None = None

    def start(self, limit_s: float) -> _Watch:
        clock = _thread_clock()
        started = time.clock_gettime(clock) if clock is not None else time.monotonic()
        watch = _Watch(threading.get_ident(), clock, limit_s, started, time.monotonic() + limit_s)
        with self._cond:
            self._watches.add(watch)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="chatapp-cpu-limit", daemon=True)
                self._thread.start()
            if self._wake_at is None or watch.check_at < self._wake_at:
                self._cond.notify()
        return watch

    def stop(self, watch: _Watch) -> None:
        with self._cond:
            self._watches.discard(watch)
            if watch.fired:  # raised, or still pending: never let it land after the block
                _set_async_exc(watch.thread_id, None)

    def _run(self) -> None:
        with self._cond:
            while True:
                now = time.monotonic()
                for watch in [w for w in self._watches if w.check_at <= now]:
                    spent = watch.spent()
                    if spent >= watch.limit_s:
                        watch.fired = True
                        self._watches.discard(watch)
                        _set_async_exc(watch.thread_id, CPULimitExceeded)
                    else:  # wall time runs at least as fast as CPU time: look again when it could be up
                        watch.check_at = now + watch.limit_s - spent
                self._wake_at = min((w.check_at for w in self._watches), default=None)
                self._cond.wait(None if self._wake_at is None else max(self._wake_at - time.monotonic(), 0.001))


_WATCHDOG = _Watchdog()


@contextlib.contextmanager
def cpu_limit(limit_s: float) -> Iterator[None]:
    """Raise CPULimitExceeded in the block once this thread has spent `limit_s` of CPU in it."""
    watch = _WATCHDOG.start(limit_s)
    try:
        yield
    finally:
        _WATCHDOG.stop(watch)
