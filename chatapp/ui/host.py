"""What the app's controllers may use of the app, and the gate every engine user goes through.

The session, attachment and inside-the-model controllers are written against `ChatHost`, a
narrow protocol of what they really use, instead of `ChatApp`: they never import the app,
and a test can run one on a small host App. `ChatApp` satisfies it.

`EngineGate` owns the engine's two locks and the "released" flag. A turn, a session or
attachment worker, the attention capture and prefill while typing hold the turn lock; tokenizing the composer and
the neighbours lookup hold the tokenize lock (they run alongside a turn). Once the app has
exited and released the engine, each context manager yields None instead of the engine, so a
late worker does nothing. Closing waits a bounded time (`release`): a worker stuck in a call
that cannot be interrupted is left running rather than holding the quit.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

if TYPE_CHECKING:
    from textual.message import Message
    from textual.screen import Screen
    from textual.widget import Widget

    from chatapp.config import Settings
    from chatapp.engine.chat import Engine

W = TypeVar("W", bound="Widget")


class EngineGate:
    """The engine, behind the locks that its users take and that closing it waits for."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        """The engine now in use; a model switch replaces it (on the UI thread)."""
        self.released = False
        """release() ran: no worker may use the engine any more."""
        self.abandoned = False
        """release() gave up waiting for a worker: the engine is still in use and was not closed."""
        self._turn = threading.Lock()
        self._tokenize = threading.Lock()

    @contextmanager
    def turn(self) -> Iterator[Engine | None]:
        """The engine for a turn or another cache-changing job, or None once released."""
        with self._turn:
            yield None if self.released else self.engine

    @contextmanager
    def typing(self, timeout: float) -> Iterator[Engine | None]:
        """The engine for prefill while typing, as `turn`; None also when another job keeps it
        longer than `timeout` seconds (a turn: nothing to prefill ahead of then)."""
        if not self._turn.acquire(timeout=timeout):
            yield None
            return
        try:
            yield None if self.released else self.engine
        finally:
            self._turn.release()

    @contextmanager
    def tokenizing(self) -> Iterator[Engine | None]:
        """The engine for tokenizing alongside a turn, or None once released."""
        with self._tokenize:
            yield None if self.released else self.engine

    def close(self, engine: Engine) -> None:
        """Close an engine that was replaced, once no worker is using it."""
        with self._turn, self._tokenize:
            engine.close()

    def release(self, last_words: Callable[[Engine], list[str]], timeout: float) -> list[str]:
        """Stop any turn, wait up to `timeout` in all for the workers using the engine, call
        `last_words` (saving the open session) and close the engine. Returns what `last_words`
        reported. Once only.

        A worker still holding a lock after `timeout` is stuck in a call that cannot be
        interrupted (llama.cpp's): nothing is saved from the engine or closed under it, and
        `abandoned` says so, for the caller to end the process without waiting for it."""
        if self.released:
            return []
        self.released = True
        self.engine.stop()
        deadline = time.monotonic() + timeout
        problems: list[str] = []
        if not self._turn.acquire(timeout=timeout):
            self.abandoned = True
            return problems
        try:
            problems = last_words(self.engine)
            if self._tokenize.acquire(timeout=max(deadline - time.monotonic(), 0.0)):
                try:
                    self.engine.close()
                finally:
                    self._tokenize.release()
            else:
                self.abandoned = True
        finally:
            self._turn.release()
        return problems


class ChatHost(Protocol):
    """The part of the app that its controllers use."""

    gate: EngineGate
    settings: Settings
    session_busy: bool
    """A session worker runs: the header says so and other session actions wait."""
    attaching: bool
    """An attach worker runs."""
    generating: bool
    """A turn's worker runs."""
    loading_model: bool
    """A model switch is loading the next model."""

    @property
    def engine(self) -> Engine: ...

    @property
    def screen(self) -> Screen[Any]: ...

    def busy(self, what: str) -> bool:
        """True (and says so) when a turn, a model load or a session job runs."""
        ...

    def show_attachments(self) -> None:
        """Redraw the attachments line for the engine's attachments."""
        ...

    def notify(self, message: str, *, title: str = "", severity: Any = "information",
               timeout: float | None = None, markup: bool = True) -> None: ...

    def post_message(self, message: Message) -> bool: ...

    def push_screen(self, screen: Any, callback: Any = None, wait_for_dismiss: bool = False) -> Any: ...

    def query_one(self, selector: type[W]) -> W: ...

    def run_worker(self, work: Any, name: str | None = "", group: str = "default", description: str = "",
                   exit_on_error: bool = True, start: bool = True, exclusive: bool = False,
                   thread: bool = False) -> Any: ...
