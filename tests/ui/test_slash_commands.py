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
    assert slash_action("/set") == "sampling" and slash_action("/set temperature 0") == "sampling('temperature 0')"
    assert unknown_command("/path/to/file is broken") is None  # a message that starts with a path is sent
    assert unknown_command("what about /bye?") is None and as_message("  //x") == "  /x"


async def test_set_with_values_sets_them_at_once_and_a_bad_one_is_one_line_kept_in_the_composer(make_app):
    """Ollama's `/set parameter temperature 0.2` (and `/set top_k 5 seed 7`, `/set min_p=0.1`) sets
    the sampler from the next reply; a name it does not know, or a value out of range, is one
    line, changes nothing and leaves the text to mend. None of it reaches the model."""
    app, seen = make_app()
    async with app.run_test(size=NARROW, message_hook=seen) as pilot:
        composer = app.query_one(Composer)
        for text in ("/set parameter temperature 0.2", "/set top_k 5 seed 7", "/SET min_p=0.1 num_predict 64"):
            composer.load_text(text)
            await pilot.press("enter")
            await pilot.pause()
        await notified(pilot, seen, lambda n: n.title == "Sampling" and "min-p 0.1" in n.message)
        generation = app.engine.generation
        assert (generation.temperature, generation.top_k, generation.seed, generation.min_p,
                generation.max_tokens) == (0.2, 5, 7, 0.1, 64)
        for text, said in (("/set top_p 7", "top_p must be"), ("/set frobs 1", "/set knows"),
                           ("/set top_k lots", "top k must be a whole number, got 'lots'")):
            composer.load_text(text)
            await pilot.press("enter")
            await notified(pilot, seen, lambda n: n.severity == "error" and said in n.message)
            await wait_until(pilot, lambda: composer.text == text)
            composer.load_text("")
        assert app.engine.generation == generation and not seen.count(TurnStarted)
