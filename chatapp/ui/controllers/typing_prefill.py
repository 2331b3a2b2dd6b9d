"""The app's side of the composer's text before Enter: its tokens (the Tokens panel) and prefill
while typing (chatapp.engine.chat.typeahead).

The composer's debounced tokenization (a pause in typing) starts a run: the engine prefills the
next prompt as far as the text in the composer makes it certain, a short batch at a time, and
each batch's `TypeAhead` goes to the Speed panel as a `TypingPrefilled` message. A run stops
as soon as anything else wants the engine: Enter, an edit (the next run starts from what the
cache still shares with the new text), Esc, a session, a model switch, a new chat, quitting.

It holds the engine's turn lock (`EngineGate.typing`), so it never runs beside a turn or any
other job that changes the cache, and it waits only briefly for it: when a turn has the lock,
there is nothing to prefill ahead of.

A run is a thread of its own rather than one of Textual's thread workers: it lowers its own
scheduling priority (the UI, and any other program, go first) and that cannot be undone by an
unprivileged process, so it must not be a pooled thread that a turn may run on later.
llama.cpp computes its batches on this one thread (chatapp.engine.local.backend).
"""

from __future__ import annotations

import os
import threading
from typing import TYPE_CHECKING

from typing import Protocol

from textual.message import Message
from textual.timer import Timer

from chatapp.engine.chat.typeahead import TypeAhead
from chatapp.engine.tokens import Token
from chatapp.errors import ChatappError
from chatapp.ui.host import ChatHost
from chatapp.ui.messages import ComposerTokenized

if TYPE_CHECKING:
    from textual.widget import Widget

NICENESS = 10
"""How much lower than the app's own the prefilling thread's priority is (as `nice -n 10`)."""
LOCK_WAIT_S = 0.5
TOKENIZE_DELAY = 0.15
"""Seconds of no typing before the composer is tokenized again."""
"""How long a run waits for the engine (the run before it letting go); a turn holds it longer."""


class TypingPrefilled(Message):
    """Where prefill while typing stands for `text`, after a batch."""

    def __init__(self, text: str, state: TypeAhead) -> None:
        super().__init__()
        self.text = text
        self.state = state

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, TypingPrefilled)


def lower_priority() -> None:
    """This thread only (Linux schedules threads one by one); elsewhere, best effort: nothing."""
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), NICENESS)
    except (AttributeError, OSError):
        pass


class TypingHost(ChatHost, Protocol):
    """What the composer's controller needs of the app beyond ChatHost."""

    composer_tokens: tuple[Token, ...]
    """The composer's tokens, which the Tokens panel draws."""
    typed_ahead: TypeAhead | None
    """Where prefill while typing stands, which the Speed panel draws."""

    @property
    def composer_text(self) -> str: ...


class TypingPrefill:
    """Tokenizes the composer's text after a pause, and starts and stops the typing prefill runs
    of one ChatApp."""

    def __init__(self, app: TypingHost) -> None:
        self.app = app
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._tokenize_timer: Timer | None = None

    # --- the composer's tokens ---------------------------------------------------------------------
    def changed(self, composer: Widget) -> None:
        """The composer's text changed: tokenize it once typing pauses."""
        if self._tokenize_timer is not None:
            self._tokenize_timer.stop()
        # The composer owns the timer, so it cannot fire after the composer has gone.
        self._tokenize_timer = composer.set_timer(TOKENIZE_DELAY, self.tokenize_composer)

    def tokenize_composer(self) -> None:
        text = self.app.composer_text
        if text:
            self.app.run_worker(lambda: self._tokenize(text), name="tokenize", group="tokenize", thread=True,
                                exclusive=True, exit_on_error=False)
        else:
            self.app.composer_tokens = ()
        self.ahead(edited=True)

    def _tokenize(self, text: str) -> None:
        with self.app.gate.tokenizing() as engine:
            if engine is not None:
                self.app.post_message(ComposerTokenized(text, engine.tokenize(text)))

    def tokenized(self, message: ComposerTokenized) -> None:
        if message.text == self.app.composer_text:
            self.app.composer_tokens = tuple(message.tokens)

    # --- prefill while typing ----------------------------------------------------------------------
    def ahead(self, edited: bool = False) -> None:
        """Prefill the next prompt for the composer's text. When an edit emptied the composer,
        what was prefilled for its text goes (the cache keeps the conversation)."""
        text = self.app.composer_text
        if not text:
            self.app.typed_ahead = None
            if not edited:
                return
        self.start(text)

    def prefilled(self, message: TypingPrefilled) -> None:
        if message.text.strip() and message.text == self.app.composer_text and not self.app.generating:
            self.app.typed_ahead = message.state

    def start(self, text: str) -> None:
        """Prefill ahead for the composer's `text`, stopping the run before (UI thread). An empty
        text only cuts back what was prefilled for text since deleted."""
        self.stop()
        app = self.app
        if (not app.settings.prefill_while_typing or text.lstrip().startswith("/")
                or app.generating or app.loading_model or app.session_busy or app.attaching):
            return
        stop = self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(text, stop), name="chatapp-typing-prefill",
                                        daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop the run, if any: it lets go of the engine within one llama.cpp graph node."""
        self._stop.set()

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def _run(self, text: str, stop: threading.Event) -> None:
        lower_priority()
        with self.app.gate.typing(LOCK_WAIT_S) as engine:
            if engine is None or stop.is_set():
                return
            try:
                for state in engine.type_ahead(text, stop):
                    self.app.post_message(TypingPrefilled(text, state))
            except ChatappError:
                pass  # e.g. a llama-server gone: the turn at Enter says so, in one line
            except Exception:  # noqa: BLE001 - a background nicety never shows a traceback in the TUI
                pass
