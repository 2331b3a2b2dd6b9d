"""Prefill while typing in the app (chatapp.ui.controllers.typing_prefill), through Textual's pilot against
the real default model: what typing does to the cache, the Speed panel's line, the record, and
that whatever happens while it runs, the cache stays a prefix of the next prompt and replies are
the ones the app gives with it off."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from chatapp import paths
from chatapp.engine.chat.typeahead import next_question
from chatapp.ui.app import ChatApp
from chatapp.ui.messages import ModelSwitched, ModelSwitchFailed, TurnFinished
from chatapp.ui.controllers.typing_prefill import TypingPrefilled
from chatapp.ui.widgets.composer import Composer
from chatapp.ui.widgets.paint import Sketch
from chatapp.ui.widgets.speed_panel import SpeedPanel
from tests.engine.chat.typeahead_texts import FOLLOW_UP, QUESTION
from tests.ui._helpers import TURN_TIMEOUT, WIDE, opened, press_in_name_box, send_text, wait_until

pytestmark = [pytest.mark.app_settings(n_ctx=2048), pytest.mark.usefixtures("quiet_machine")]


async def settled(pilot, app: ChatApp) -> None:
    """The debounce has fired and the typing run it started is over."""
    await pilot.pause(0.3)
    await wait_until(pilot, lambda: not app.typing_prefill.running, TURN_TIMEOUT)
    await pilot.pause()


def assert_consistent(app: ChatApp) -> None:
    """The cache holds a prefix of the next prompt for the composer's text."""
    engine = app.engine
    prompt = engine.prompt_ids(next_question(engine.context_messages(), app.query_one(Composer).text))
    cached = engine.cached_tokens()
    assert prompt[:len(cached)] == cached


async def type_in(pilot, app: ChatApp, text: str, step: int = 40) -> None:
    composer = app.query_one(Composer)
    for end in range(step, len(text), step):
        composer.load_text(text[:end])
        await pilot.pause(0.2)  # about the debounce: some pauses start a run, some edits stop one
    composer.load_text(text)
    await settled(pilot, app)


async def test_typing_fills_the_cache_the_panel_says_so_and_the_reply_is_the_same(make_app):
    replies = {}
    for on in (True, False):
        app, seen = make_app(prefill_while_typing=on)
        async with app.run_test(size=WIDE, message_hook=seen) as pilot:
            await type_in(pilot, app, QUESTION)
            assert_consistent(app)
            if on:
                state = seen.of(TypingPrefilled)[-1].state
                assert state.total - state.ready <= 30 and state.prefilled == state.ready
                shown = app.query_one(SpeedPanel).query_one("#speed-figures", Sketch).plain
                assert f"ready: {state.ready:,} of {state.total:,} tokens prefilled while typing" in shown
            else:
                assert not seen.of(TypingPrefilled) and app.engine.cached_tokens() == []
            await pilot.press("enter")
            await wait_until(pilot, lambda: seen.count(TurnFinished), TURN_TIMEOUT)
            record = seen.of(TurnFinished)[-1].record
            replies[on] = record.reply
            if on:
                assert record.prefilled_while_typing > 0 and record.prefill_tokens <= 30
                assert record.cached_tokens == record.prompt_tokens - record.prefill_tokens
            else:
                assert record.prefilled_while_typing == 0 and record.cached_tokens == 0
    assert replies[True] == replies[False]


async def test_edits_deleting_everything_esc_and_a_paste_keep_the_cache_a_prefix(make_app):
    app, seen = make_app()
    async with app.run_test(size=WIDE, message_hook=seen) as pilot:
        composer = app.query_one(Composer)
        await type_in(pilot, app, QUESTION)
        ahead = app.engine.cached_tokens()
        composer.load_text(QUESTION.replace("vegetable garden", "vegetable plot", 1))  # an edit mid-text
        await settled(pilot, app)
        assert_consistent(app)
        assert app.engine.cached_tokens() != ahead  # cut back to the edit, and filled again
        composer.load_text(QUESTION[:-12] + "Jul")  # the last word, mid-way
        await settled(pilot, app)
        assert_consistent(app)
        composer.load_text("")  # everything deleted
        await settled(pilot, app)
        assert_consistent(app)
        assert len(app.engine.cached_tokens()) < 30
        composer.insert(FOLLOW_UP * 2)  # a paste
        await pilot.pause(0.2)
        await pilot.press("escape")  # stops the run, whenever it comes
        await settled(pilot, app)
        assert_consistent(app)
        composer.load_text(FOLLOW_UP)
        await settled(pilot, app)
        assert_consistent(app)
        assert seen.of(TypingPrefilled)[-1].state.prefilled > 0


async def test_a_turn_a_session_or_a_model_switch_while_it_runs(make_app, default_model_path):
    """Enter, a new session and a model switch each come while a typing run may be computing:
    the turn's reply is the one the app gives with it off, and the cache stays a prefix."""
    plain, seen_plain = make_app(prefill_while_typing=False)
    async with plain.run_test(size=WIDE, message_hook=seen_plain) as pilot:
        expected = [(await send_text(pilot, plain, seen_plain, text)).record.reply for text in (QUESTION, FOLLOW_UP)]
    copy = paths.models_dir() / "another-copy.gguf"
    copy.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(default_model_path, copy)
    app, seen = make_app()
    async with app.run_test(size=WIDE, message_hook=seen) as pilot:
        composer = app.query_one(Composer)
        composer.load_text(QUESTION)
        await pilot.pause(0.2)  # the debounce fired: a run is prefilling (or about to)
        assert (await send_text(pilot, app, seen, QUESTION)).record.reply == expected[0]
        composer.load_text(FOLLOW_UP)
        await pilot.pause(0.2)
        assert (await send_text(pilot, app, seen, FOLLOW_UP)).record.reply == expected[1]

        composer.load_text(QUESTION)
        await pilot.pause(0.2)
        await pilot.press("f6")
        await pilot.press("n")
        await press_in_name_box(pilot, "fresh")  # a new session: another conversation
        await opened(pilot, seen)
        await settled(pilot, app)
        assert [m.role for m in app.engine.messages] == ["system"]
        assert_consistent(app)

        composer.load_text(FOLLOW_UP)
        await pilot.pause(0.2)
        app.models_ui.chosen(str(copy))  # as the model picker does
        await wait_until(pilot, lambda: seen.count(ModelSwitched) + seen.count(ModelSwitchFailed), TURN_TIMEOUT)
        assert not seen.of(ModelSwitchFailed)
        await settled(pilot, app)
        assert Path(app.engine.summary.path) == copy.resolve()
        assert_consistent(app)
        assert len(app.engine.cached_tokens()) > 0  # the new model prefilled ahead too
