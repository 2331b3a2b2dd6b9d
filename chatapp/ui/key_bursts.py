"""Printable keys that arrive together reach the app as one message, not one each.

A terminal without bracketed paste types a 20 KB paste as 20,000 key events. Textual's driver
hands each to the event loop on its own (`Driver.send_message`: a coroutine scheduled from the
input thread, then a pass through the app's message queue), and measured in tmux on the 2-core
development machine that alone took the UI thread about 100 µs a key: 2 s of the 4 s the paste
took to show (cProfile, benchmarks/tui_vs_llama_cli.py --case typing).

`KeyBurstDriver` is mixed into whichever driver Textual picks. Printable keys with no modifier
are gathered on the input thread; the first of a burst asks the loop to collect them, and by the
time it runs, every key parsed meanwhile is in the same `KeyBurst`. Anything else (another key,
the mouse, a resize, a paste) first sends what was gathered, so the app sees events in the order
they came. The app gives a burst to the composer in one call when it has the focus and keys
by their own dispatch otherwise (see ChatApp.on_key_burst). A key typed by a person is alone in
its burst and arrives as quickly as before: one loop iteration.
"""

from __future__ import annotations

import threading
from typing import Any, Protocol

from textual import events
from textual.app import App, ReturnType
from textual.driver import Driver
from textual.message import Message


class KeyBurst(Message):
    """Printable keys in the order they were typed."""

    def __init__(self, keys: list[events.Key]) -> None:
        super().__init__()
        self.keys = keys

    @property
    def text(self) -> str:
        return "".join(key.character or "" for key in self.keys)


def typed(key: events.Key) -> bool:
    """A key that types its character: printable, and not a binding's Alt/Ctrl combination
    (tmux and xterm send Alt+E as ESC e, which Textual reads as "alt+e" with the character "e")."""
    return key.is_printable and bool(key.character) and (len(key.key) == 1 or "+" not in key.key)


def gathers(message: Message) -> bool:
    """A printable key without modifiers: what a paste types (and what no binding needs).
    Textual names a key with a modifier "ctrl+x", "alt+x", ...; a plain key has no "+"."""
    return (isinstance(message, events.Key) and message.is_printable and message.character is not None
            and len(message.character) == 1 and "+" not in message.key)


class KeyBurstDriver(Driver):
    """A mixin over a Textual driver: see the module docstring."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._burst: list[events.Key] = []
        self._burst_lock = threading.Lock()

    def send_message(self, message: Message) -> None:
        with self._burst_lock:
            if gathers(message):
                first = not self._burst
                self._burst.append(message)  # type: ignore[arg-type]
                if first:
                    self._loop.call_soon_threadsafe(self._send_burst)
                return
            self._flush_locked()
            super().send_message(message)

    def _send_burst(self) -> None:
        with self._burst_lock:
            self._flush_locked()

    def _flush_locked(self) -> None:
        if not self._burst:
            return
        keys, self._burst = self._burst, []
        burst = KeyBurst(keys) if len(keys) > 1 else keys[0]
        burst.set_sender(self._app)
        super().send_message(burst)


def with_key_bursts(driver_class: type[Driver]) -> type[Driver]:
    """`driver_class` with KeyBurstDriver in front of it."""
    if issubclass(driver_class, KeyBurstDriver):
        return driver_class
    return type(f"KeyBurst{driver_class.__name__}", (KeyBurstDriver, driver_class), {})


class TypesText(Protocol):
    def type_text(self, text: str) -> None: ...


class KeyBurstApp(App[ReturnType]):
    """An App that reads keys through a `KeyBurstDriver` and hands printable ones straight to
    `typing_target()` when it names a widget: no binding takes a printable key there, and
    Textual's checking and forwarding cost about 75 µs a key, 1.5 s for 20 KB arriving as typed
    keys."""

    def get_driver_class(self) -> type[Driver]:
        return with_key_bursts(super().get_driver_class())

    def typing_target(self) -> TypesText | None:
        """Where printable keys may go straight now; None: through Textual's own handling."""
        return None

    async def on_event(self, event: events.Event) -> None:
        if (isinstance(event, events.Key) and typed(event) and not event.is_forwarded
                and (target := self.typing_target()) is not None):
            self.app_focus = True
            target.type_text(event.character)
            return
        await super().on_event(event)

    async def on_key_burst(self, burst: KeyBurst) -> None:
        """Printable keys the driver gathered: one edit for the typing target, or each key in
        turn through Textual's own handling, as if it had come alone."""
        if (target := self.typing_target()) is not None:
            self.app_focus = True
            target.type_text(burst.text)
            return
        for key in burst.keys:
            await self.on_event(key)
