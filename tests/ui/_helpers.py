"""Waiting on a running app without bare sleeps (after oterm's tests/_helpers.py)."""

from __future__ import annotations

import time
from collections.abc import Callable

from textual.message import Message
from textual.notifications import Notification, Notify
from textual.pilot import Pilot


async def wait_until(pilot: Pilot, predicate: Callable[[], object], timeout: float = 60.0,
                     step: float = 0.05) -> None:
    """Let the app run until `predicate()` is true; fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            what = getattr(predicate, "__name__", predicate)
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")
        await pilot.pause(step)


class Messages(list):
    """A message_hook that keeps every message the app dispatches."""

    def __call__(self, message: Message) -> None:
        self.append(message)

    def of(self, kind: type) -> list:
        return [m for m in self if isinstance(m, kind)]

    def count(self, kind: type) -> int:  # type: ignore[override]
        return len(self.of(kind))


async def notified(pilot: Pilot, seen: Messages, match: Callable[[Notification], bool],
                   timeout: float = 10.0) -> Notification:
    """Wait for a notification the app posted that `match` accepts, and return it. A handler's
    notify() is dispatched after the handler returns, so asserting at once can miss it."""

    def found() -> Notification | None:
        return next((m.notification for m in seen.of(Notify) if match(m.notification)), None)

    await wait_until(pilot, lambda: found() is not None, timeout)
    return found()


def fixed_ids(monkeypatch) -> None:
    """Message ids 00000001, 00000002, … instead of random ones, for snapshots that show them."""
    import itertools

    numbers = itertools.count(1)
    monkeypatch.setattr("chatapp.engine.chat.tree.new_id", lambda taken: f"{next(numbers):08x}")
