"""The advertised keys do what they say in a real terminal: chatapp in tmux, sent the bytes that
tmux and xterm send for Alt+letter (ESC and the letter) and the ones a terminal speaking kitty's
keyboard protocol sends (CSI code;3u). Before, Alt+E typed an "e" into the composer."""

from __future__ import annotations

import shutil

import pytest

from tests.ui._helpers import wait_until
from tests.ui._tmux import Tmux, chat_after_one_turn

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux")

ALT = {  # how each terminal sends Alt+letter
    "tmux and xterm": lambda letter: ("key", f"M-{letter}"),
    "kitty protocol": lambda letter: ("raw", f"\x1b[{ord(letter)};3u"),
}


@pytest.fixture
def chat(isolated_env):
    with chat_after_one_turn(isolated_env) as term:
        yield term


def alt(term: Tmux, how: str, letter: str) -> None:
    kind, data = ALT[how](letter)
    term.keys(data) if kind == "key" else term.raw(data)


def edited_text(screen: str) -> str:
    """The composer's first line while an edit is pending: the row under its titled top border
    (its left part: a notification may cover the right)."""
    rows = screen.split("\n")
    title = next(i for i, row in enumerate(rows) if row.startswith("─") and "editing question" in row)
    return rows[title + 1][:80].strip()


@pytest.mark.parametrize("how", list(ALT))
def test_alt_keys_act_and_type_nothing_in_tmux_and_kitty_terminals(chat, how):
    term = chat
    term.keys("M-Up", "M-Up")  # Alt+arrows arrive as CSI 1;3A everywhere: the question is selected
    alt(term, how, "e")
    screen = term.wait_for("editing question", 10)
    assert edited_text(screen) == "Name a colour."  # the question to edit, no stray "e"
    term.keys("Escape")
    term.wait_for("branch cancelled", 10)
    term.keys("C-u")  # clears the whole input
    term.wait_for("Ctrl+U clears", 10)

    alt(term, how, "t")
    term.wait_for("Conversation tree", 30)
    term.keys("Escape")
    term.wait_gone("Conversation tree")
    term.keys("M-Down")  # the reply
    alt(term, how, "c")
    term.wait_for("branches after reply", 10)
    term.keys("Escape")
    alt(term, how, "d")
    term.wait_for("Delete message", 10)
    term.keys("n")
    term.wait_gone("Delete message")
    alt(term, how, "n")  # fork (Alt+F reads as a word jump in tmux and xterm)
    term.wait_for("Fork the shown path", 10)
    term.keys("Escape")
    assert "Message the model" in term.screen()  # nothing was typed into the composer on the way


async def test_after_a_click_on_a_message_typing_goes_to_the_composer(make_app):
    from chatapp.ui.widgets.composer import Composer
    from chatapp.ui.widgets.transcript import Transcript, UserMessage
    from tests.ui._helpers import Messages, send

    app, seen = make_app()
    async with app.run_test(size=(160, 40), message_hook=seen) as pilot:
        await send(pilot, "Name a colour.", seen)
        question = app.query_one(Transcript).query_one(UserMessage)
        await pilot.click(question)
        await wait_until(pilot, lambda: app.selection() is not None)
        await pilot.press("h", "i")
        await wait_until(pilot, lambda: app.query_one(Composer).text == "hi")
        assert isinstance(seen, Messages) and app.focused is app.query_one(Composer)
