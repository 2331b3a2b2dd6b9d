"""The app's side of prefill while typing (chatapp.engine.chat.typeahead).

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

from textual.message import Message

from chatapp.engine.chat.typeahead import TypeAhead
from chatapp.errors import ChatappError

if TYPE_CHECKING:
    from chatapp.ui.host import ChatHost

NICENESS = 10
"""How much lower than the app's own the prefilling thread's priority is (as `nice -n 10`)."""
LOCK_WAIT_S = 0.5
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


class TypingPrefill:
    """Starts and stops the typing prefill runs of one ChatApp."""

    def __init__(self, app: ChatHost) -> None:
        self.app = app
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

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
