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


def shown_after(record, view=(), branch=None):
    """The shown branch after a turn, as the App sets it: the turn's record and view, and figures
    as the engine gives them right after a turn (every cell in use is the branch's)."""
    from chatapp.engine.chat.branch_states import BranchFigures
    from chatapp.ui.shown import ShownBranch

    figures = BranchFigures(record.extra.get("message_id"), record.kv_used, record.kv_used, record.kv_used,
                            record.n_ctx)
    return (branch or ShownBranch()).after_turn(record, list(view), figures)


TURN_TIMEOUT = 120.0
"""Seconds a test waits for a turn: a busy 2-core machine can take many times the quiet figure."""


async def workers_done(pilot: Pilot, group: str) -> None:
    await wait_until(pilot, lambda: not any(w.group == group and w.is_running for w in pilot.app.workers),
                     TURN_TIMEOUT)


async def send(pilot: Pilot, text: str, seen: Messages):
    """Put text in the composer, press Enter, and wait for the turn (and its autosave) to end."""
    from chatapp.ui.messages import TurnFailed, TurnFinished

    app = pilot.app
    done = seen.count(TurnFinished) + seen.count(TurnFailed)
    app.edit_text(text)
    await pilot.press("enter")
    await wait_until(pilot, lambda: seen.count(TurnFinished) + seen.count(TurnFailed) > done, TURN_TIMEOUT)
    await wait_until(pilot, lambda: not app.generating)
    await workers_done(pilot, "turn")
    return [m for m in seen if isinstance(m, (TurnFinished, TurnFailed))][-1]


async def next_of(pilot: Pilot, seen: Messages, kind: type, before: int, group: str | None = None):
    """Wait for the message of `kind` after the first `before` ones, and for `group`'s workers."""
    await wait_until(pilot, lambda: seen.count(kind) > before, TURN_TIMEOUT)
    if group is not None:
        await workers_done(pilot, group)
    await wait_until(pilot, lambda: not pilot.app.session_busy and not pilot.app.generating
                     and not pilot.app.loading_model, TURN_TIMEOUT)
    await pilot.pause()
    return seen.of(kind)[before]
