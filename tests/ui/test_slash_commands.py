"""Peers' chat commands in the composer (issue 59): /help, /?, /bye, /exit, /quit, /clear and
/set run the app's own actions; an unknown /word is refused in one line and stays in the
composer; two slashes send a message that starts with one. None of them reaches the model."""

from __future__ import annotations

import pytest

from chatapp.ui.messages import TurnStarted
from chatapp.ui.screens.help import HelpScreen
from chatapp.ui.slash import ACTIONS, as_message, slash_action, unknown_command
from chatapp.ui.widgets.composer import Composer
from tests.ui._helpers import NARROW, finished, notified, wait_until


@pytest.mark.parametrize("text", ["/help", "/?", " /HELP "])
async def test_help_words_open_the_help_and_send_nothing(make_app, text):
    app, seen = make_app()
    async with app.run_test(size=NARROW, message_hook=seen) as pilot:
        app.query_one(Composer).load_text(text)
        await pilot.press("enter")
        await wait_until(pilot, lambda: isinstance(app.screen, HelpScreen))
        assert not seen.count(TurnStarted) and app.query_one(Composer).text == ""


@pytest.mark.parametrize("text", ["/bye", "/exit", "/quit"])
async def test_quit_words_quit(make_app, text):
    app, seen = make_app()
    async with app.run_test(size=NARROW, message_hook=seen) as pilot:
        app.query_one(Composer).load_text(text)
        await pilot.press("enter")
        await wait_until(pilot, lambda: not app.is_running)
        assert not seen.count(TurnStarted)


async def test_an_unknown_word_is_refused_and_kept_and_two_slashes_send_one(make_app):
    app, seen = make_app(max_tokens=4)
    async with app.run_test(size=NARROW, message_hook=seen) as pilot:
        composer = app.query_one(Composer)
        composer.load_text("/frobnicate")
        await pilot.press("enter")
        refused = await notified(pilot, seen, lambda n: "/frobnicate is not a chat command" in n.message)
        assert "//frobnicate" in refused.message
        assert composer.text == "/frobnicate" and not seen.count(TurnStarted)
        composer.load_text("//bye")
        await pilot.press("enter")
        await finished(pilot, app, seen)
        assert seen.of(TurnStarted)[0].user_text == "/bye" and app.engine.messages[-2].content == "/bye"


def test_every_peer_command_names_an_action_the_app_has():
    from chatapp.ui.app import ChatApp

    assert all(callable(getattr(ChatApp, f"action_{name}", None)) for name in ACTIONS.values())
    assert slash_action("/set") == "sampling" and slash_action("/set temperature 0") is None
    assert unknown_command("/path/to/file is broken") is None  # a message that starts with a path is sent
    assert unknown_command("what about /bye?") is None and as_message("  //x") == "  /x"
