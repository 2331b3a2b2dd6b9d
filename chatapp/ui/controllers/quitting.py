"""Quitting: Ctrl+C pressed twice or Ctrl+Q, never dropping unsent text without asking, then the
engine released within a bounded time.

ChatApp holds one `QuitController` (`app.quitting`). Text typed and not sent goes with the open
session as its draft (chatapp.ui.controllers.sessions); in a chat no session keeps, quitting asks
first. After the app has exited, `release_engine` waits for a worker that uses the engine, saves
the open session and closes the engine, each within QUIT_WAIT of the quit key.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Protocol

from chatapp.engine.sessions import LiveSession
from chatapp.ui.host import ChatHost

QUIT_WINDOW = 2.0
"""Seconds in which a second Ctrl+C quits."""
QUIT_WAIT = 0.75
"""Seconds from the quit key that quitting waits for a running worker to let go of the engine:
a stopped turn does in well under that, and Ctrl+Q is to end chatapp within a second whatever
a worker does (the app's own shutdown comes out of the same time)."""
MIN_QUIT_WAIT = 0.1


class QuitHost(ChatHost, Protocol):
    def exit(self, result: Any = None, return_code: int = 0, message: Any = None) -> None: ...


class QuitSessions(Protocol):
    """What quitting needs of the sessions controller."""

    live: LiveSession | None

    def quit_drops_text(self, quit: Callable[[], object]) -> bool:
        """True when quitting now would drop unsent text no session keeps (then it asks, and calls `quit`)."""
        ...

    def save_on_quit(self) -> list[str]:
        """Save the open session as it stands; what went wrong, in words."""
        ...


class QuitController:
    def __init__(self, app: QuitHost, sessions: QuitSessions, stop_work: Callable[[], None]) -> None:
        """`stop_work()` stops what runs beside a turn (prefill while typing, an attach)."""
        self.app = app
        self.sessions = sessions
        self.stop_work = stop_work
        self._armed_at: float | None = None
        """When Ctrl+C asked "Quit?": a second press within QUIT_WINDOW quits."""
        self._quit_at: float | None = None
        """When a quit key was pressed: quitting's wait for workers counts from there."""

    def pressed_twice(self) -> None:
        """Ctrl+C with nothing to stop or copy: asks, and the second press within QUIT_WINDOW quits."""
        now = time.monotonic()
        if self._armed_at is not None and now - self._armed_at <= QUIT_WINDOW:
            self._armed_at = None
            self.quit()
            return
        self._armed_at = now
        self.app.notify("Press Ctrl+C again within 2 s to quit (or Ctrl+Q).", title="Quit?", timeout=QUIT_WINDOW)

    def quit(self) -> None:
        """Ctrl+Q: quit now, unless unsent text that no session keeps would go (asks first)."""
        if not self.sessions.quit_drops_text(self._now):
            self._now()

    def _now(self) -> None:
        self._quit_at = time.monotonic()
        self.stop_work()
        self.app.engine.stop()
        self.app.exit()

    def release_engine(self, timeout: float | None = None) -> list[str]:
        """After the app has exited: stop any turn, wait for its worker, save the open session,
        close the engine. Returns what went wrong saving, in words, for the terminal. Once only.

        A worker that is still running after `timeout` (by default what is left of QUIT_WAIT
        since the quit key; one llama.cpp call cannot be interrupted, and tokenizing an 8 MiB
        attachment is one call) is left to the process's exit: the engine it uses is not saved
        from or closed under it, and the line returned says so."""
        if timeout is None:
            spent = 0.0 if self._quit_at is None else time.monotonic() - self._quit_at
            timeout = max(QUIT_WAIT - spent, MIN_QUIT_WAIT)
        self.stop_work()
        gate = self.app.gate
        problems = gate.release(lambda engine: self.sessions.save_on_quit(), timeout)
        if gate.abandoned:
            live = self.sessions.live
            kept = f"; session {live.name} keeps what its last save held" if live is not None else ""
            problems.append(f"quit without waiting for a job still running in the model{kept}")
        return problems
