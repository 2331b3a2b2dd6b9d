"""Printable keys gathered on the driver's input thread reach the app as bursts, in order with
everything else, and land in the composer (or, elsewhere, through Textual's own key handling)."""

from __future__ import annotations

import pytest
import threading

from textual import events
from textual.app import App, ComposeResult
from textual.drivers.headless_driver import HeadlessDriver
from textual.widgets import Input

from chatapp.ui.key_bursts import KeyBurst, gathers, with_key_bursts
from chatapp.ui.widgets.composer import Composer

from tests.ui._helpers import WIDE, wait_until

pytestmark = pytest.mark.app_settings(threads=0)


def key(character: str) -> events.Key:
    name = {" ": "space", ",": "comma", "\r": "enter"}.get(character, character)
    return events.Key(name, character)


def test_what_is_gathered():
    assert gathers(key("a")) and gathers(key(" ")) and gathers(key(","))
    assert not gathers(key("\r")) and not gathers(events.Key("ctrl+a", "\x01"))
    assert not gathers(events.Key("alt+x", "x")) and not gathers(events.Paste("text"))


class Recorder(App):
    def __init__(self) -> None:
        super().__init__()
        self.seen: list[str] = []

    def compose(self) -> ComposeResult:
        yield Input(id="field")

    def on_key_burst(self, burst: KeyBurst) -> None:
        self.seen.append(burst.text)


async def test_keys_from_the_input_thread_arrive_gathered_and_in_order():
    app = Recorder()
    order: list[str] = []

    def hook(message) -> None:  # what the app takes off its queue, in that order
        if isinstance(message, KeyBurst):
            order.append(f"burst:{message.text}")
        elif isinstance(message, events.Paste) and not message.is_forwarded:
            order.append(f"paste:{message.text}")
        elif isinstance(message, events.Key) and not message.is_forwarded:
            order.append(f"key:{message.character}")

    async with app.run_test(message_hook=hook) as pilot:
        driver = with_key_bursts(HeadlessDriver)(app)
        hold = threading.Lock()

        def typist() -> None:
            with hold:  # the loop is busy: as while the input thread parses a 4 KB read
                for character in "hello world":
                    driver.send_message(key(character))
                driver.send_message(events.Paste("P"))
                for character in "ok\r":
                    driver.send_message(key(character))

        with hold:
            thread = threading.Thread(target=typist)
            thread.start()
            while not thread.is_alive():
                pass
        thread.join()
        await wait_until(pilot, lambda: "key:\r" in order)
        await pilot.pause(0.1)
        assert order == ["burst:hello world", "paste:P", "burst:ok", "key:\r"]


async def test_a_burst_lands_in_the_composer_as_one_edit(make_app):
    app, seen = make_app()
    async with app.run_test(size=WIDE, message_hook=seen) as pilot:
        composer = app.query_one(Composer)
        assert app.focused is composer
        edits = []
        original = composer.insert
        composer.insert = lambda text, *a, **k: (edits.append(text), original(text, *a, **k))[1]
        text = "the keeper logged wave 7 at the rocks, " * 50
        app.post_message(KeyBurst([key(c) for c in text]))
        await wait_until(pilot, lambda: composer.text == text)
        assert edits == [text]
        assert not app.generating


async def test_a_burst_elsewhere_goes_key_by_key_through_textual(make_app):
    """With the system prompt editor open (Ctrl+S), a burst is typed into it, not the composer."""
    app, seen = make_app()
    async with app.run_test(size=WIDE, message_hook=seen) as pilot:
        await pilot.press("ctrl+s")
        await wait_until(pilot, lambda: len(app.screen_stack) == 2 and app.focused is not None)
        editor = app.focused
        before = editor.text
        app.post_message(KeyBurst([key(c) for c in " and be kind"]))
        await wait_until(pilot, lambda: editor.text != before)
        await pilot.pause(0.1)
        assert " and be kind" in editor.text and app.query_one(Composer).text == ""
