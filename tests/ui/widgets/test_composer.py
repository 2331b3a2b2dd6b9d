"""The composer takes a burst of typed keys (a paste from a terminal without bracketed paste)
as one edit, keeps the cursor in view, and tells a pasted line break from a send; a bracketed
paste goes in whole, its line breaks never sending."""

from __future__ import annotations

import pytest
from textual import events
from textual.app import App, ComposeResult

from chatapp.ui.messages import TurnStarted
from chatapp.ui.widgets.composer import Composer

from tests.ui._helpers import WIDE, wait_until

pytestmark = pytest.mark.app_settings(threads=0)


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


def pasted_file() -> str:
    """About 20 KB over 300 lines, a blank one among them and a line break at the end, as a
    bracketed paste brings a file's contents."""
    lines = [f"line {i:03d}: the keeper trimmed the wick and wrote the hour in the log." for i in range(300)]
    lines[150] = ""
    return "\n".join(lines) + "\nTHE-END\n"


def count_edits(composer: Composer) -> list:
    """Every edit the composer makes from now on (typed, inserted or pasted, all go through edit())."""
    edits = []
    original = composer.edit
    composer.edit = lambda edit: (edits.append(edit), original(edit))[1]
    return edits


async def test_a_bracketed_paste_of_twenty_kilobytes_goes_in_whole_in_one_edit_and_does_not_send():
    app = Host()
    async with app.run_test(size=(160, 30)) as pilot:
        composer = app.query_one(Composer)
        composer.focus()
        edits = count_edits(composer)
        text = pasted_file()
        assert len(text) > 20_000 and text.count("\n") == 301
        app.post_message(events.Paste(text))
        await wait_until(pilot, lambda: composer.text == text)
        await pilot.pause(0.3)  # past a burst's flush: a line break taken for Enter would have sent by now
        assert composer.text == text
        assert 1 <= len(edits) <= 3  # one insert, not one per line or per character
        assert not app.sent
        assert composer.cursor_location == composer.document.end == (301, 0)
        assert composer.scroll_offset.y == composer.max_scroll_y > 0  # the end is in view


async def test_keys_typed_just_before_a_paste_stay_before_it():
    """Keys still gathered from a burst when a bracketed paste arrives go in first, in order; an
    Enter among them is a line break, since the paste followed it."""
    app = Host()
    async with app.run_test() as pilot:
        composer = app.query_one(Composer)
        composer.focus()
        burst(app, "Summarize this:\n")
        app.post_message(events.Paste("PASTED"))
        burst(app, " ok")
        await wait_until(pilot, lambda: composer.text.endswith(" ok"))
        await pilot.pause(0.3)
        assert composer.text == "Summarize this:\nPASTED ok"
        assert not app.sent


async def test_a_pasted_file_in_the_chat_starts_no_turn(make_app):
    app, seen = make_app()
    async with app.run_test(size=WIDE, message_hook=seen) as pilot:
        composer = app.query_one(Composer)
        assert app.focused is composer
        text = pasted_file()
        app.post_message(events.Paste(text))
        await wait_until(pilot, lambda: composer.text == text)
        await pilot.pause(0.3)
        assert composer.text == text
        assert not seen.count(TurnStarted) and not app.generating
        assert [m.role for m in app.engine.messages] == ["system"]


async def test_keys_typed_one_by_one_appear_at_once_and_edit_keys_see_them():
    app = Host()
    async with app.run_test() as pilot:
        composer = app.query_one(Composer)
        composer.focus()
        await pilot.press("h", "e", "l", "l", "o")
        assert composer.text == "hello"
        await pilot.press("backspace", "backspace", "p")
        assert composer.text == "help"
