"""The chat App, driven through Textual's pilot against the real default model."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console
from textual.command import CommandPalette
from textual.widgets import Input, OptionList, TextArea
from textual.widgets._toast import Toast, ToastRack

from chatapp import paths
from chatapp.config import load_settings
from chatapp.ui.controllers import quitting
from chatapp.ui.controllers import turns as turns_module
from chatapp.format import count, ms, tps
from chatapp.ui.messages import (
    ComposerTokenized, ModelInfoReady, ModelSwitched, ModelSwitchFailed, PrefillFinished, PrefillProgressed,
    ReplyProgress, TurnFailed, TurnFinished, TurnStarted, TurnTrimmed,
)
from chatapp.ui.screens.help import HelpScreen
from chatapp.ui.pacing import UpdatePacer
from chatapp.ui.controllers.turns import DECODE_SWITCH_INTERVAL
from chatapp.ui.screens.model_picker import ModelPickerScreen
from chatapp.ui.screens.sampling import SamplingScreen
from chatapp.ui.screens.system_prompt import SystemPromptScreen
from chatapp.ui.widgets.composer import Composer
from chatapp.ui.widgets.header import AppHeader
from chatapp.ui.widgets.kv_panel import KVPanel
from chatapp.ui.widgets.quant_panel import QuantPanel
from chatapp.ui.widgets.speed_panel import SpeedPanel
from chatapp.ui.widgets.tokens_panel import TokensPanel
from chatapp.ui.widgets.transcript import Notice, Reply, Transcript, UserMessage
from tests.ui._helpers import NARROW, TURN_TIMEOUT, WIDE, finished, notified, send_text, wait_until

pytestmark = pytest.mark.app_settings(threads=0)


# --- a turn ---------------------------------------------------------------------------------
async def test_typed_message_streams_a_reply_and_fills_the_panels(make_app):
    app, seen = make_app()
    async with app.run_test(size=WIDE, message_hook=seen) as pilot:
        await wait_until(pilot, lambda: seen.count(ModelInfoReady))
        await pilot.press(*"Hello there", "enter")
        record = (await finished(pilot, app, seen)).record

        assert seen.of(TurnStarted)[0].user_text == "Hello there"
        assert app.query_one(Composer).text == ""
        assert seen.count(PrefillFinished) == 1
        progress = seen.of(ReplyProgress)
        assert len(progress) >= 2
        assert all(record.reply.startswith(p.text) for p in progress)
        assert len(progress[0].text) < len(record.reply)

        transcript = app.query_one(Transcript)
        assert [w.render().plain for w in transcript.query(UserMessage)] == ["Hello there"]
        (reply,) = transcript.query(Reply)
        assert reply.source == record.reply
        assert not reply.has_class("-streaming")

        speed = app.query_one(SpeedPanel).figures
        assert speed["prefill_tokens"] == count(record.prefill_tokens)
        assert speed["prefill_tps"] == tps(record.prefill_tps)
        assert speed["ttft_ms"] == ms(record.ttft_ms)
        assert speed["decode_tokens"] == count(record.decode_tokens)
        assert speed["decode_tps"] == tps(record.decode_tps)
        assert speed["finish_reason"] == record.finish_reason

        kv = app.query_one(KVPanel)
        assert kv.kv_used == record.kv_used == app.engine.kv_used()
        assert f"this turn wrote: {count(record.kv_used - record.cached_tokens)} cells" in kv.plain

        assert list(app.query_one(TokensPanel).turn_view) == seen.of(TurnFinished)[-1].view
        assert app.query_one(QuantPanel).info is not None
        assert "generating" not in app.query_one(AppHeader).render().plain

        first = record
        second = (await send_text(pilot, app, seen, "And one more thing?")).record
        assert second.cached_tokens > 0
        assert kv.kv_used == second.kv_used > first.kv_used
        assert f"this turn wrote: {count(second.kv_used - second.cached_tokens)} cells" in kv.plain
        assert len(transcript.query(Reply)) == 2


async def test_the_composer_has_the_focus_at_start(make_app):
    app, _ = make_app()
    async with app.run_test(size=WIDE):
        assert app.focused is app.query_one(Composer)


async def test_header_names_model_quant_backend_ctx_and_session(make_app):
    app, seen = make_app(session="demo")
    async with app.run_test(size=NARROW, message_hook=seen) as pilot:
        await pilot.pause()
        header = app.query_one(AppHeader).render().plain
        summary = app.engine.summary
        for part in (summary.name, summary.quant, summary.backend, "ctx 1,024", "session: demo"):
            assert part in header


async def test_tokens_panel_counts_like_the_tokenize_command(make_app, isolated_env):
    app, seen = make_app()
    text = "Tokenizers split words: unbelievable, naïve café 🙂!"
    async with app.run_test(size=WIDE, message_hook=seen) as pilot:
        app.query_one(Composer).load_text(text)
        await wait_until(pilot, lambda: any(m.text == text for m in seen.of(ComposerTokenized)))
        await pilot.pause()
        panel = app.query_one(TokensPanel)
        assert [t.id for t in panel.composer_tokens] == [t.id for t in app.engine.tokenize(text)]
        command = [str(Path(sys.executable).parent / "chatapp"), "tokenize", "--json", text]
        cli = subprocess.run(command, capture_output=True, text=True, env={**os.environ, **isolated_env}, check=True,
                             timeout=120)
        assert len(panel.composer_tokens) == len(json.loads(cli.stdout))
        assert f"composer · {len(json.loads(cli.stdout))} tokens" in app.query_one("#tokens-summary").plain


async def test_composer_tokenizes_after_typing_pauses(make_app):
    app, seen = make_app()
    async with app.run_test(size=WIDE, message_hook=seen) as pilot:
        await pilot.press(*"abcdefgh")
        await wait_until(pilot, lambda: any(m.text == "abcdefgh" for m in seen.of(ComposerTokenized)))
        assert seen.count(ComposerTokenized) < 8  # debounced, not one per key


# --- keys in the composer ---------------------------------------------------------------------
async def test_ctrl_j_and_alt_enter_insert_newlines_and_enter_sends(make_app):
    app, seen = make_app()
    async with app.run_test(size=NARROW, message_hook=seen) as pilot:
        await pilot.press("a", "ctrl+j", "b", "alt+enter", "c")
        assert app.query_one(Composer).text == "a\nb\nc"
        await pilot.press("enter")
        await finished(pilot, app, seen)
        assert seen.of(TurnStarted)[0].user_text == "a\nb\nc"
        assert app.engine.messages[-2].content == "a\nb\nc"


async def test_enter_while_generating_keeps_the_text(make_app):
    app, seen = make_app(max_tokens=1000, n_ctx=2048)  # a reply long enough to still be streaming below
    async with app.run_test(size=NARROW, message_hook=seen) as pilot:
        app.query_one(Composer).load_text("Tell me a long story about a lighthouse keeper.")
        await pilot.press("enter")
        await wait_until(pilot, lambda: seen.count(ReplyProgress), TURN_TIMEOUT)
        assert app.generating
        app.query_one(Composer).load_text("next question")
        await pilot.press("enter")
        assert app.query_one(Composer).text == "next question"
        assert seen.count(TurnStarted) == 1
        await pilot.press("escape")
        await wait_until(pilot, lambda: not app.generating, TURN_TIMEOUT)


# --- stopping -----------------------------------------------------------------------------------
async def test_escape_during_a_long_prefill_stops_it_and_the_speed_panel_showed_its_progress(make_app):
    """A ~3,000-token paste: Esc after the first prefill chunk ends the turn there (llama.cpp
    abandons the batch it is on), with what was read still cached, exactly as llama.cpp has it."""
    app, seen = make_app(n_ctx=4096, max_tokens=64)
    text = " ".join(f"Line {i}: the keeper trimmed the wick and wrote in the log." for i in range(170))
    async with app.run_test(size=WIDE, message_hook=seen) as pilot:
        app.query_one(Composer).load_text(text)
        await pilot.press("enter")
        await wait_until(pilot, lambda: seen.count(PrefillProgressed), TURN_TIMEOUT)
        progress = seen.of(PrefillProgressed)[0].event
        assert 0 < progress.done < progress.total
        figures = app.query_one("#speed-figures")
        await wait_until(pilot, lambda: f"of {count(progress.total)} tok (live)" in figures.plain)
        assert "tok/s" in figures.plain and "s left" in figures.plain
        await pilot.press("escape")
        record = (await finished(pilot, app, seen)).record
        assert record.finish_reason == "stopped" and record.generated_tokens == 0
        assert record.prefill_tokens < record.prompt_tokens - record.cached_tokens
        assert app.engine.kv_used() == record.kv_used == record.cached_tokens + record.prefill_tokens
        assert app.engine.cached_tokens() == app.engine.prompt_ids(app.engine.messages[:-1])[:record.kv_used]
        again = (await send_text(pilot, app, seen, "Say hi.")).record
        assert again.finish_reason in ("stop", "length")


async def test_escape_stops_and_keeps_the_partial_reply_then_the_next_turn_works(make_app):
    app, seen = make_app(max_tokens=400)
    async with app.run_test(size=WIDE, message_hook=seen) as pilot:
        app.query_one(Composer).load_text("Write a long story about a dragon who learns to fly.")
        await pilot.press("enter")
        await wait_until(pilot, lambda: seen.count(ReplyProgress), TURN_TIMEOUT)
        await pilot.press("escape")
        record = (await finished(pilot, app, seen)).record
        assert record.finish_reason == "stopped"
        assert 0 < record.generated_tokens < 400
        transcript = app.query_one(Transcript)
        reply = transcript.query(Reply).last()
        assert reply.has_class("-stopped")
        assert reply.source == record.reply
        assert any("stopped" in n.render().plain for n in transcript.query(Notice))
        assert app.engine.messages[-1].stopped

        app.engine.set_generation(max_tokens=24)
        after = await send_text(pilot, app, seen, "Thanks!")
        assert isinstance(after, TurnFinished)
        assert after.record.finish_reason in ("stop", "length")
        assert not transcript.query(Reply).last().has_class("-stopped")


async def test_ctrl_c_while_generating_stops_instead_of_quitting(make_app):
    app, seen = make_app(max_tokens=400)
    async with app.run_test(size=NARROW, message_hook=seen) as pilot:
        app.query_one(Composer).load_text("Write a long poem about the sea.")
        await pilot.press("enter")
        await wait_until(pilot, lambda: seen.count(ReplyProgress), TURN_TIMEOUT)
        await pilot.press("ctrl+c")
        assert (await finished(pilot, app, seen)).record.finish_reason == "stopped"
        assert app.is_running and app.return_code is None


async def test_ctrl_c_when_idle_asks_first_and_quits_on_the_second_press(make_app, monkeypatch):
    app, seen = make_app()
    async with app.run_test(size=NARROW, message_hook=seen) as pilot:
        await pilot.press("ctrl+c")
        await pilot.pause()
        assert app.is_running and app.return_code is None
        await notified(pilot, seen, lambda n: n.title == "Quit?")

        monkeypatch.setattr(quitting, "QUIT_WINDOW", 0.05)
        await pilot.pause(0.2)
        await pilot.press("ctrl+c")  # too late: asks again
        assert app.return_code is None
        monkeypatch.setattr(quitting, "QUIT_WINDOW", 2.0)
        await pilot.press("ctrl+c")
        await wait_until(pilot, lambda: app.return_code is not None, 5)


# --- the full-context policy -----------------------------------------------------------------------
async def test_a_full_context_drops_old_turns_and_says_which(make_app):
    app, seen = make_app(n_ctx=256)
    message = ("Here is a fairly long message that takes up room in a small context window, "
               "so that old turns must go: turn {}.")
    async with app.run_test(size=WIDE, message_hook=seen) as pilot:
        for turn in range(1, 9):
            result = await send_text(pilot, app, seen, message.format(turn))
            assert isinstance(result, TurnFinished), result.error
            if seen.count(TurnTrimmed):
                break
        trimmed = seen.of(TurnTrimmed)[0].event
        assert trimmed.dropped_turns >= 1
        notices = [n.render().plain for n in app.query_one(Transcript).query(Notice)]
        text = next(n for n in notices if n.startswith("context full"))
        turns = trimmed.dropped_turns
        assert f"dropped {turns} oldest turn{'s' if turns > 1 else ''} ({len(trimmed.dropped)} messages: " in text
        assert "'Here is a fairly long" in text
        dropped = app.query_one(Transcript).query(".-dropped")
        assert len(dropped) == len(trimmed.dropped)
        assert seen.of(TurnFinished)[-1].record.dropped_turns == turns


async def test_a_message_too_big_for_the_context_goes_back_to_the_composer(make_app):
    app, seen = make_app(n_ctx=256)
    huge = "word " * 400
    async with app.run_test(size=NARROW, message_hook=seen) as pilot:
        result = await send_text(pilot, app, seen, huge)
        assert isinstance(result, TurnFailed) and result.refused
        assert app.query_one(Composer).text == huge
        assert not app.query_one(Transcript).query(UserMessage)
        await notified(pilot, seen, lambda n: n.severity == "error")


# --- conversation actions -------------------------------------------------------------------------
async def test_new_chat_clears_the_transcript(make_app):
    app, seen = make_app()
    async with app.run_test(size=NARROW, message_hook=seen) as pilot:
        await send_text(pilot, app, seen, "Hi!")
        assert app.query_one(Transcript).query(Reply)
        await pilot.press("ctrl+n")
        await pilot.pause()
        transcript = app.query_one(Transcript)  # the first-time greeting, and nothing else
        assert not transcript.messages() and [n.has_class("-greeting") for n in transcript.children] == [True]
        assert [m.role for m in app.engine.messages] == ["system"]
        kv = app.query_one(KVPanel)  # the cache keeps the old cells, of which only the system prompt is reused
        figures = app.engine.branch_figures()
        assert kv.kv_used == app.engine.kv_used() == figures.cells and kv.record is None
        assert f"branch: {figures.tokens} tok" in kv.plain and figures.cached == figures.tokens > 0
        tokens = app.query_one(TokensPanel)
        assert tokens.turn_view == () and tokens.mode == "composer"


async def test_regenerate_answers_the_last_message_again(make_app):
    app, seen = make_app()
    async with app.run_test(size=WIDE, message_hook=seen) as pilot:
        first = (await send_text(pilot, app, seen, "Name a colour.")).record
        await pilot.press("ctrl+r")
        again = (await finished(pilot, app, seen, 2)).record
        assert seen.of(TurnStarted)[-1].regenerate
        assert again.reply == first.reply  # temperature 0: the same answer
        # The cache still holds the prompt it answered: a regenerate prefills nothing.
        assert first.prefill_tokens == first.prompt_tokens and again.reuse_broken_at is None
        assert again.prefill_tokens == 0 and again.cached_tokens == again.prompt_tokens
        transcript = app.query_one(Transcript)
        assert len(transcript.query(UserMessage)) == 1 and len(transcript.query(Reply)) == 1
        assert [m.role for m in app.engine.messages] == ["system", "user", "assistant"]


async def test_copy_last_reply(make_app):
    app, seen = make_app()
    async with app.run_test(size=NARROW, message_hook=seen) as pilot:
        record = (await send_text(pilot, app, seen, "Say hello.")).record
        await pilot.press("f5")
        assert app.clipboard == record.reply


async def test_system_prompt_modal_sets_the_prompt(make_app):
    app, seen = make_app()
    async with app.run_test(size=NARROW, message_hook=seen) as pilot:
        await pilot.press("ctrl+s")
        assert isinstance(app.screen, SystemPromptScreen)
        app.screen.query_one(TextArea).load_text("You answer in one word.")
        await pilot.press("ctrl+s")
        await pilot.pause()
        assert not isinstance(app.screen, SystemPromptScreen)
        assert app.engine.system_prompt == "You answer in one word."


async def test_sampling_modal_validates_then_applies(make_app):
    app, seen = make_app()
    async with app.run_test(size=NARROW, message_hook=seen) as pilot:
        await pilot.press("ctrl+o")
        screen = app.screen
        assert isinstance(screen, SamplingScreen)
        screen.query_one("#temperature", Input).value = "9"
        await pilot.click("#apply")
        assert app.screen is screen
        assert "temperature" in str(screen.query_one("#sampling-error").render())
        screen.query_one("#temperature", Input).value = "0.5"
        screen.query_one("#top-k", Input).value = "lots"
        screen.query_one("#top-k", Input).focus()
        await pilot.press("enter")
        await pilot.pause()
        assert "top k must be a whole number, got 'lots'" in str(screen.query_one("#sampling-error").render())
        for field, value in (("max-tokens", "48"), ("top-k", "7"), ("top-p", "0.8"), ("min-p", "0"), ("seed", "42")):
            screen.query_one(f"#{field}", Input).value = value
        screen.query_one("#seed", Input).focus()
        await pilot.press("enter")
        await pilot.pause()
        assert app.screen is not screen
        generation = app.engine.generation
        assert (generation.temperature, generation.max_tokens, generation.top_k, generation.top_p, generation.min_p,
                generation.seed) == (0.5, 48, 7, 0.8, 0.0, 42)


async def test_switch_model_loads_the_new_engine_and_keeps_the_conversation(make_app, default_model_path):
    copy = paths.models_dir() / "another-copy.gguf"
    copy.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(default_model_path, copy)
    app, seen = make_app()
    async with app.run_test(size=WIDE, message_hook=seen) as pilot:
        await send_text(pilot, app, seen, "Hi!")
        old = app.engine
        await pilot.press("ctrl+l")
        await wait_until(pilot, lambda: isinstance(app.screen, ModelPickerScreen))  # listed off the UI thread
        options = app.screen.query_one(OptionList)
        index = next(i for i in range(options.option_count) if options.get_option_at_index(i).id == str(copy))
        options.highlighted = index
        await pilot.press("enter")
        await wait_until(pilot, lambda: seen.count(ModelSwitched) + seen.count(ModelSwitchFailed), TURN_TIMEOUT)
        assert not seen.of(ModelSwitchFailed), seen.of(ModelSwitchFailed)[0].error
        await pilot.pause()
        assert app.engine is not old
        assert Path(app.engine.summary.path) == copy.resolve()
        assert [m.content for m in app.engine.messages] == [m.content for m in old.messages]
        await wait_until(pilot, lambda: any(m.path == str(copy.resolve()) for m in seen.of(ModelInfoReady)))
        result = await send_text(pilot, app, seen, "And again?")
        assert isinstance(result, TurnFinished)


# --- layout, help, themes ---------------------------------------------------------------------------
async def test_panels_beside_when_wide_toggle_below_when_narrow(make_app):
    app, seen = make_app()
    async with app.run_test(size=WIDE, message_hook=seen) as pilot:
        main = app.query_one("#main")
        assert main.has_class("-wide") and main.has_class("-panels")
        assert app.query_one(KVPanel).region.x > app.query_one(Transcript).region.x
        await pilot.press("f2")
        assert not main.has_class("-panels")
        assert app.query_one(Transcript).region.width == WIDE[0]
        await pilot.press("f2")

        await pilot.resize_terminal(*NARROW)
        await pilot.pause()
        assert not main.has_class("-wide")
        assert app.query_one(Composer).region.bottom <= NARROW[1] - 1
        assert app.query_one(Composer).region.height >= 1
        await pilot.press("f3")  # shows the panels and moves to the next one
        await pilot.pause()
        assert main.has_class("-panels")
        assert app.query_one(KVPanel).has_class("-current") and app.query_one(KVPanel).region.height > 0
        assert app.query_one(SpeedPanel).region.height == 0
        assert app.query_one(KVPanel).region.y > app.query_one(Transcript).region.y


async def test_a_turn_at_80x24(make_app):
    app, seen = make_app()
    async with app.run_test(size=NARROW, message_hook=seen) as pilot:
        result = await send_text(pilot, app, seen, "Hello!")
        assert isinstance(result, TurnFinished)
        reply = app.query_one(Transcript).query(Reply).last()
        assert reply.region.height > 0 and reply.region.bottom <= NARROW[1]


async def test_the_decode_worker_gets_the_gil_back_quickly_only_while_a_turn_streams(make_app, monkeypatch):
    app, seen = make_app(max_tokens=48)
    during: list[float] = []
    stream_turn = turns_module.stream_turn

    def recording(engine, events, post, **kwargs) -> None:
        def posted(message) -> None:  # read on the worker thread, as each message is posted
            during.append(sys.getswitchinterval())
            post(message)

        stream_turn(engine, events, posted, **kwargs)

    monkeypatch.setattr(turns_module, "stream_turn", recording)
    before = sys.getswitchinterval()
    async with app.run_test(size=WIDE, message_hook=seen) as pilot:
        assert isinstance(await send_text(pilot, app, seen, "Tell me about lighthouses."), TurnFinished)
        assert sys.getswitchinterval() == before
    assert len(during) >= 3 and during == pytest.approx([DECODE_SWITCH_INTERVAL] * len(during))
    assert DECODE_SWITCH_INTERVAL < before


async def test_a_held_back_reply_still_ends_whole_and_the_panels_stay_live(make_app, monkeypatch):
    app, seen = make_app(max_tokens=48)
    app.reply_pacer = UpdatePacer(budget=1e-9)  # any UI work holds the next text update back
    async with app.run_test(size=WIDE, message_hook=seen) as pilot:
        transcript = app.query_one(Transcript)
        shown: list[str] = []
        show_progress = transcript.show_progress

        async def counted(text: str) -> None:
            shown.append(text)
            await show_progress(text)

        monkeypatch.setattr(transcript, "show_progress", counted)
        speed = app.query_one(SpeedPanel)
        live_figures: list[str] = []
        watch_decode = speed.watch_decode
        monkeypatch.setattr(speed, "watch_decode",
                            lambda: (speed.decode is not None and live_figures.append(speed.decode), watch_decode()))
        record = (await send_text(pilot, app, seen, "Tell me about lighthouses.")).record
        assert seen.count(ReplyProgress) >= 3
        assert len(shown) == 1  # the first update only
        assert len(live_figures) == seen.count(ReplyProgress)  # the panels took every one
        assert transcript.query(Reply).last().source == record.reply


async def test_a_worker_result_landing_while_the_app_closes_is_dropped(make_app):
    """Seen in CI: the composer's tokens arrived during shutdown, after the widgets had gone."""
    app, seen = make_app()
    async with app.run_test(size=NARROW) as pilot:
        await pilot.pause()
    assert not app.is_running and not app.query(Composer)
    await app.on_composer_tokenized(ComposerTokenized("late", []))
    await app.on_model_info_ready(ModelInfoReady(str(app.engine.summary.path), None, "late"))


async def test_help_opens_with_f1_and_question_mark(make_app):
    app, seen = make_app()
    async with app.run_test(size=NARROW, message_hook=seen) as pilot:
        await pilot.press("f1")
        assert isinstance(app.screen, HelpScreen)
        console = Console(width=200, record=True)
        console.print(app.screen.table)
        text = console.export_text()
        for key in ("Ctrl+N", "Ctrl+R", "Ctrl+C", "Esc", "F2", "Ctrl+J", "Alt+Enter"):
            assert key in text
        await pilot.press("escape")
        assert not isinstance(app.screen, HelpScreen)
        await pilot.press("?")  # in the composer it is just a character
        assert app.query_one(Composer).text == "?"
        app.query_one(Transcript).focus()
        await pilot.press("?")
        assert isinstance(app.screen, HelpScreen)


async def test_command_palette_lists_the_actions(make_app):
    app, seen = make_app()
    async with app.run_test(size=WIDE, message_hook=seen) as pilot:
        await pilot.press("ctrl+p")
        assert isinstance(app.screen, CommandPalette)
        await pilot.press(*"new chat")
        await pilot.pause(0.5)
        await pilot.press("enter")
        await pilot.pause()
        assert not isinstance(app.screen, CommandPalette)
        await notified(pilot, seen, lambda n: n.message == "New chat")


async def test_theme_picker_previews_live_and_applies(make_app):
    app, seen = make_app()
    async with app.run_test(size=WIDE, message_hook=seen) as pilot:
        kv = app.query_one(KVPanel)
        assert app.theme == "chatapp-dark"
        dark_colours = {str(span.style) for span in kv.drawn(40).spans}

        await pilot.press("ctrl+t")
        assert isinstance(app.screen, CommandPalette)
        await pilot.press(*"synthwave")
        await pilot.pause(0.3)
        await pilot.press("down")
        await wait_until(pilot, lambda: app.theme == "chatapp-synthwave", 5)  # previewed, not yet chosen
        assert isinstance(app.screen, CommandPalette)
        await pilot.press("escape")
        await wait_until(pilot, lambda: app.theme == "chatapp-dark", 5)
        assert not paths.config_file().exists()  # a preview is not a choice

        await pilot.press("ctrl+t")
        await pilot.press(*"chatapp-light")
        await pilot.pause(0.3)
        await pilot.press("enter")
        await wait_until(pilot, lambda: app.theme == "chatapp-light", 5)
        await pilot.pause()
        assert load_settings().theme == "chatapp-light"  # and the next start's theme
        light_free = app.theme_variables["kv-free"]
        light_colours = {str(span.style) for span in kv.drawn(40).spans}
        assert light_colours != dark_colours
        assert any(light_free.lower() in colour.lower() for colour in light_colours)


async def test_a_bad_user_theme_warns_and_the_app_still_runs(make_app):
    themes = paths.user_themes_dir()
    themes.mkdir(parents=True)
    (themes / "broken.toml").write_text('name = "broken"\nprimary = "not-a-colour"\n')
    app, seen = make_app(theme="no-such-theme")
    async with app.run_test(size=NARROW, message_hook=seen) as pilot:
        await pilot.pause()
        await notified(pilot, seen, lambda n: n.severity == "warning" and "broken.toml" in n.message
                       and "primary" in n.message)
        await notified(pilot, seen, lambda n: n.severity == "warning" and "no-such-theme" in n.message)
        assert app.theme == "chatapp-dark"
        assert isinstance(await send_text(pilot, app, seen, "Hi"), TurnFinished)


async def test_typed_keys_reach_the_composer_directly_and_bindings_still_work(make_app):
    """Printable keys for the focused composer skip Textual's per-key binding checks (a paste
    without bracketed paste is thousands of them); a "?" stays text there, F1 still opens help."""
    from textual import events

    app, _ = make_app()
    async with app.run_test(size=WIDE) as pilot:
        composer = app.query_one(Composer)
        text = "What is 2+2? " * 300
        for character in text:
            app.post_message(events.Key("question_mark" if character == "?" else character, character))
        await wait_until(pilot, lambda: composer.text == text)
        assert not isinstance(app.screen, HelpScreen)
        await pilot.press("f1")
        assert isinstance(app.screen, HelpScreen)


@pytest.mark.parametrize("size", [WIDE, NARROW], ids=["wide", "narrow"])
async def test_a_toast_never_covers_the_composer_or_the_newest_reply(make_app, size):
    """Issue 59: toasts sat over the composer's border. Three at once, long ones, stay clear of
    the composer and of the transcript's last lines."""
    app, seen = make_app()
    async with app.run_test(size=size, message_hook=seen, notifications=True) as pilot:
        await wait_until(pilot, lambda: seen.count(ModelInfoReady))
        for n in range(3):
            app.notify(f"notice {n}: " + "a long line that wraps " * 6, title="Test", timeout=30)
        await wait_until(pilot, lambda: len(app.screen.query(Toast)) == 3)
        await pilot.pause()
        composer = app.query_one(Composer).region
        transcript = app.query_one(Transcript).region
        newest = transcript.intersection(transcript.translate((0, transcript.height - 3)))
        for region in (composer, newest):  # what is drawn on top at each of its cells
            covered = {(x, y) for x in range(region.x, region.right) for y in range(region.y, region.bottom)
                       if isinstance(app.screen.get_widget_at(x, y)[0], (Toast, ToastRack))}
            assert not covered, (region, sorted(covered)[:3])


async def test_the_tokens_panel_follows_a_reply_while_it_streams(make_app):
    """It showed the turn before until the reply ended, while KV and Speed followed it live."""
    app, seen = make_app(max_tokens=1000, n_ctx=2048)  # long enough to still be streaming below
    async with app.run_test(size=WIDE, message_hook=seen) as pilot:
        first = (await send_text(pilot, app, seen, "Say hi.")).record
        tokens = app.query_one(TokensPanel)
        app.query_one(Composer).load_text("Tell me a long story about a lighthouse keeper.")
        await pilot.press("enter")
        await wait_until(pilot, lambda: seen.count(ReplyProgress) > 2, TURN_TIMEOUT)
        await pilot.pause()
        latest = seen.of(ReplyProgress)[-1]
        streamed = latest.text
        summary, pieces = tokens.query_one("#tokens-summary").plain, tokens.query_one("#tokens-pieces").render().plain
        assert app.generating and tokens.mode == "turn" and tokens.live_reply is not None
        assert summary.startswith("this turn · ") and "last turn" not in summary
        # drawn as the cache's tokens (issue 59), not as text: the reply's ids, described as they come
        assert "the reply's tokens as they are decoded" in summary and latest.tokens
        assert streamed.strip()[:20] in "".join(t.piece for t in latest.tokens)
        assert abs(len(latest.tokens) - latest.live.decode_tokens) <= 2, (len(latest.tokens), latest.live)
        drawn = pieces.replace("\n", "").replace("·", " ")  # shown_piece's visible space
        assert streamed.strip()[:20] in drawn and first.reply.strip() not in drawn
        await pilot.press("escape")
        await wait_until(pilot, lambda: not app.generating, TURN_TIMEOUT)
        await pilot.pause()
        assert tokens.live_reply is None and tokens.query_one("#tokens-summary").plain.startswith("last turn · ")
