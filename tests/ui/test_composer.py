"""The composer takes a burst of typed keys (a paste from a terminal without bracketed paste)
as one edit, keeps the cursor in view, and tells a pasted line break from a send."""

from __future__ import annotations

from textual import events
from textual.app import App, ComposeResult

from chatapp.ui.widgets.composer import Composer

from ._helpers import wait_until


class Host(App):
    def __init__(self) -> None:
        super().__init__()
        self.sent: list[str] = []

    def compose(self) -> ComposeResult:
        yield Composer(id="composer")

    def on_composer_submitted(self, message: Composer.Submitted) -> None:
        self.sent.append(message.text)


def key(character: str) -> events.Key:
    name = {" ": "space", "\n": "enter"}.get(character, character)
    return events.Key(name, None if character == "\n" else character)


def burst(app: App, text: str) -> None:
    """Keys as a terminal delivers a paste without bracketed paste: all queued at once."""
    for character in text:
        app.post_message(key(character))


async def test_twenty_kilobytes_of_typed_keys_go_in_whole_and_in_a_few_edits():
    app = Host()
    async with app.run_test(size=(160, 30)) as pilot:
        composer = app.query_one(Composer)
        composer.focus()
        edits = []
        original = composer.insert
        composer.insert = lambda text, *a, **k: (edits.append(text), original(text, *a, **k))[1]
        text = "".join(f"w{i:05d} " for i in range(2857)) + "THE-END"
        for start in range(0, len(text), 1000):  # as tmux delivers them: in pieces
            burst(app, text[start:start + 1000])
            await pilot.pause(0.01)
        await wait_until(pilot, lambda: composer.text == text)
        assert len(edits) < len(text) // 20  # gathered, not one edit per key
        await pilot.pause(0.2)
        assert composer.cursor_location == (0, len(text))
        assert composer.scrollable_content_region.height > 0 and composer.scroll_offset.y > 0  # scrolled to the end
        assert not app.sent


async def test_an_enter_inside_a_burst_is_a_pasted_line_break_and_one_that_ends_it_sends():
    app = Host()
    async with app.run_test() as pilot:
        composer = app.query_one(Composer)
        composer.focus()
        burst(app, "first line\nsecond line")
        await wait_until(pilot, lambda: composer.text == "first line\nsecond line")
        assert not app.sent
        await pilot.pause(0.3)  # a person's pause: the next Enter is typed, not pasted
        await pilot.press("enter")
        await wait_until(pilot, lambda: app.sent == ["first line\nsecond line"])
        composer.clear()
        burst(app, "a scripted question\n")  # text and Enter at once, as `tmux send-keys 'q' Enter`
        await wait_until(pilot, lambda: len(app.sent) == 2)
        assert app.sent[1] == "a scripted question"


async def test_keys_typed_one_by_one_appear_at_once_and_edit_keys_see_them():
    app = Host()
    async with app.run_test() as pilot:
        composer = app.query_one(Composer)
        composer.focus()
        await pilot.press("h", "e", "l", "l", "o")
        assert composer.text == "hello"
        await pilot.press("backspace", "backspace", "p")
        assert composer.text == "help"
