"""Focus is never lost (issue 59): after a choice in the token popup (F10, a reply, Alt+P, then
1) the popup that had the keys is removed; before, typed text then went nowhere and only a
mouse click on the composer brought the keys back."""

from __future__ import annotations

from chatapp.ui.messages import TurnFinished
from chatapp.ui.widgets.token_popup import TokenPopup
from tests.ui._helpers import next_of, send, wait_until


async def test_typing_lands_in_the_composer_after_branching_from_the_token_popup(make_app):
    app, seen = make_app(max_tokens=12)
    async with app.run_test(size=(160, 48), message_hook=seen) as pilot:
        await pilot.press("f10")
        await send(pilot, "Name three fruits.", seen)
        await pilot.press("alt+p")
        await wait_until(pilot, lambda: app.query(TokenPopup) and app.query_one(TokenPopup).has_focus)
        await pilot.press("1")
        await next_of(pilot, seen, TurnFinished, 1, "turn")
        await wait_until(pilot, lambda: not app.query(TokenPopup))
        await pilot.press("o", "k")
        composer = app.query_one("#composer")
        await wait_until(pilot, lambda: composer.text == "ok")
        assert app.focused is composer


async def test_ctrl_d_deletes_a_character_then_quits_on_an_empty_composer_as_a_shell_does(app):
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.press("a", "b", "home", "ctrl+d")
        composer = app.query_one("#composer")
        await wait_until(pilot, lambda: composer.text == "b")
        assert app.is_running
        await pilot.press("ctrl+u", "ctrl+d")
        await wait_until(pilot, lambda: not app.is_running)
