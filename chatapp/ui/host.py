"""What the app's controllers may use of the app, and the gate every engine user goes through.

The controllers are written against `ChatHost`, a narrow protocol of what they really use,
instead of `ChatApp`: they never import the app or a widget, and a test can run one on a small
host App. `ChatApp` satisfies it.

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
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from textual.message import Message
    from textual.screen import Screen

    from chatapp.config import Settings
    from chatapp.engine.chat import Engine
    from chatapp.engine.inside.neighbours import Neighbour
    from chatapp.engine.sampling import TokenProbs
    from chatapp.engine.sessions import LiveSession
    from chatapp.engine.retrieval.context import RetrievedContext
    from chatapp.ui.shown import Selection, Shown, ShownBranch


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
        """Close an engine that was replaced, once no worker is using it. The locks are only
        passed through: a worker that took the old engine holds one while it uses it, and every
        later one gets the new engine, so the close itself need not keep the new one's users
        (prefill while typing gives up after LOCK_WAIT_S) waiting."""
        with self._turn, self._tokenize:
            pass
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
    """The part of the app that its controllers use: what the screen shows, set as attributes
    (chatapp.ui.shown), and a few things only the app can do to its widgets. No widget is ever
    handed out: a controller changes what is shown, and the app's widgets, bound to it, draw."""

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
    status: str
    """What the app is doing, in the header: "", "prefill…", "opening session…"."""
    session_name: str | None
    """The open session's name, in the header; None: nothing is saved."""
    preset_name: str | None
    """The preset the chat runs with, in the header; None: none."""
    reply_shape: str | None
    """The shape every reply must have (chatapp.engine.shape), in words, in the header; None: free text."""
    attached: tuple[str, ...]
    """The attached files' names, in the header."""
    branch: ShownBranch
    """The shown branch's cache, which the panels draw."""
    neighbours: tuple[int, list[Neighbour] | None, str | None] | None
    """The nearest tokens in the embeddings to the token selected in the Tokens panel."""

    @property
    def engine(self) -> Engine: ...

    @property
    def screen(self) -> Screen[Any]: ...

    def busy(self, what: str) -> bool:
        """True (and says so) when a turn, a model load or a session job runs."""
        ...

    def show_attachments(self) -> None:
        """Show the engine's attachments (in the header)."""
        ...

    async def show_path(self, path: list[Shown], dropped: int = 0, select: int | None = None, *,
                        anew: bool = False) -> None:
        """Draw this path in the transcript (`anew`: another conversation, nothing of the old one
        kept); select its `select`-th message."""
        ...

    async def add_notice(self, line: str, kind: str = "info") -> None:
        """A line in the transcript, under the last message."""
        ...

    async def show_sources(self, context: RetrievedContext) -> None:
        """What a turn placed before its question, under it in the transcript."""
        ...

    def selection(self) -> Selection | None:
        """The message selected in the transcript, if any."""
        ...

    def step_selection(self, step: int) -> None:
        """Select the message before (-1) or after (+1) the selected one."""
        ...

    def edit_text(self, text: str, *, only_if_empty: bool = False) -> None:
        """Put `text` in the composer to edit and send (with `only_if_empty`, never over what is typed)."""
        ...

    def focus_composer(self) -> None: ...

    @property
    def composer_text(self) -> str:
        """What is typed in the composer, not sent yet."""
        ...

    def clear_composer(self) -> None:
        """Empty the composer (an edit: Ctrl+Z brings the text back)."""
        ...

    def mark_composer(self, line: str | None) -> None:
        """Say over the composer what Enter will do (an edit, a branch); None: send as usual."""
        ...

    def notify(self, message: str, *, title: str = "", severity: Any = "information",
               timeout: float | None = None, markup: bool = True) -> None: ...

    def post_message(self, message: Message) -> bool: ...

    def push_screen(self, screen: Any, callback: Any = None, wait_for_dismiss: bool = False) -> Any: ...

    def call_from_thread(self, callback: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run `callback` on the UI thread and return its result (from a worker thread)."""
        ...

    def run_worker(self, work: Any, name: str | None = "", group: str = "default", description: str = "",
                   exit_on_error: bool = True, start: bool = True, exclusive: bool = False,
                   thread: bool = False) -> Any: ...


class SessionKeeper(Protocol):
    """What other controllers need of the sessions controller: the open session and its saves.
    Typed here, so that the controllers sit side by side and none imports another."""

    live: LiveSession | None
    """The open session, saved after every turn; None: nothing is saved."""

    def request(self, action: Any, name: str, new_name: str | None = None, screen: Any = None) -> None:
        """Carry out a sessions action ("fork", "open", …), or say in one line why not."""
        ...

    def save_after_change(self, live: LiveSession) -> None:
        """On a worker, after the active leaf changed: save it."""
        ...

    def keep_scores(self, live: LiveSession, message_id: str, probs: tuple[TokenProbs, ...]) -> None:
        """On a worker, after a reply was scored: keep its probabilities with the session."""
        ...

    def moved_to(self, engine: Engine) -> None:
        """After a model switch: the open session goes on with `engine`."""
        ...

    def keep_choice(self, **chosen: str) -> None:
        """The user chose a thinking mode, how earlier thoughts are kept, or a tool choice: kept
        with the open session (chatapp.engine.sessions.choices)."""
        ...
