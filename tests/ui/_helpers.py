"""What the UI tests share: waiting on a running app without bare sleeps (after oterm's
tests/_helpers.py), sending a turn, the sessions they open, and the scripted app the snapshots draw."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

from textual.message import Message
from textual.notifications import Notification, Notify
from textual.pilot import Pilot
from textual.widgets import Input

from chatapp.config import Settings
from chatapp.engine.chat.engine import Engine
from chatapp.engine.sessions import SessionManager
from chatapp.ui.app import ChatApp
from chatapp.ui.messages import SessionOpened, TurnFailed, TurnFinished
from chatapp.ui.screens.sessions import NameScreen
from chatapp.ui.widgets.composer import Composer
from chatapp.ui.widgets.header import AppHeader
from chatapp.ui.themes import load_themes
from chatapp.ui.widgets.transcript import Reply, Transcript
from tests.ui.scripted import ScriptedBackend


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
    from chatapp.ui.controllers.turns import record_figures
    from chatapp.ui.shown import ShownBranch

    return (branch or ShownBranch()).after_turn(record, list(view), record_figures(record))


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


# --- the app's own pilot tests (tests/ui/test_app*.py and the modules beside them) -------------------
WIDE, NARROW = (120, 40), (80, 24)


async def send_text(pilot, app: ChatApp, seen: Messages, text: str) -> TurnFinished | TurnFailed:
    """Put text in the composer (as typed into it), press Enter, and wait for the turn to end."""
    done = seen.count(TurnFinished) + seen.count(TurnFailed)
    composer = app.query_one(Composer)
    composer.load_text(text)
    await pilot.press("enter")
    await wait_until(pilot, lambda: seen.count(TurnFinished) + seen.count(TurnFailed) > done, TURN_TIMEOUT)
    await wait_until(pilot, lambda: not app.generating)
    await turn_worker_done(pilot, app)
    return [m for m in seen if isinstance(m, (TurnFinished, TurnFailed))][-1]


async def turn_worker_done(pilot, app: ChatApp) -> None:
    """The turn's worker goes on after TurnFinished to autosave the session: wait for it."""
    await wait_until(pilot, lambda: not any(w.group == "turn" and w.is_running for w in app.workers), TURN_TIMEOUT)


async def finished(pilot, app: ChatApp, seen: Messages, turns: int = 1) -> TurnFinished:
    """Wait for the n-th TurnFinished and for its handler to finish (the hook sees it first)."""
    await wait_until(pilot, lambda: seen.count(TurnFinished) >= turns, TURN_TIMEOUT)
    await wait_until(pilot, lambda: not app.generating)
    await turn_worker_done(pilot, app)
    return seen.of(TurnFinished)[turns - 1]


# --- sessions ---------------------------------------------------------------------------------------
def store():
    return SessionManager.open(Settings(), create=False)


async def opened(pilot, seen: Messages, n: int = 1) -> SessionOpened:
    await wait_until(pilot, lambda: seen.count(SessionOpened) >= n, TURN_TIMEOUT)
    await wait_until(pilot, lambda: not pilot.app.session_busy)
    return seen.of(SessionOpened)[n - 1]


def header(app: ChatApp) -> str:
    return app.query_one(AppHeader).render().plain


def texts(app: ChatApp, kind) -> list[str]:
    widgets = app.query_one(Transcript).query(kind)
    return [w.source if isinstance(w, Reply) else w.render().plain for w in widgets]


async def press_in_name_box(pilot, name: str) -> None:
    assert isinstance(pilot.app.screen, NameScreen)
    pilot.app.screen.query_one(Input).value = name
    await pilot.press("enter")
    await pilot.pause()


# --- the scripted app the snapshots draw ----------------------------------------------------------------
# Read at collection time, before isolated_env moves the config folder: a user folder that is
# never a folder keeps the user's own themes out of the snapshot cases.
SHIPPED_THEMES = sorted(theme.name for theme in load_themes(user_dir=Path(os.devnull)).themes)


def scripted_app(default_model_path, theme: str) -> ChatApp:
    # Prefill while typing runs when the typing pauses: how much it did before Enter depends on
    # timing, so the snapshots leave it off (tests/ui/test_typing_prefill.py covers it). Incognito:
    # keeping the chat is a save on the turn's worker and a toast, which the snapshots would race
    # (tests/ui/test_first_hour_sessions.py covers keeping).
    settings = Settings(theme=theme, n_ctx=4096, temperature=0.0, prefill_while_typing=False, incognito=True)
    engine = Engine(ScriptedBackend(str(default_model_path), n_ctx=4096), settings)
    return ChatApp(engine, settings=settings)
