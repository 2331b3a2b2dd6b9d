"""A thinking model's reply in the TUI (issue 37): its thought drawn apart from the answer, open
and counted while it streams, folded once the answer starts, folded too when the path is drawn
again from the tree (as a session opens it); and "stop thinking and answer" (Ctrl+G) ending the
thought of a turn that is streaming. On the real default model given a template shaped like
DeepSeek-R1's (its generation prompt opens the thought), made with tests.gguf_copy."""

from __future__ import annotations

import pytest
from textual.widgets._collapsible import CollapsibleTitle

from chatapp.engine.sessions.choices import SessionChoices
from chatapp.ui.app import ChatApp
from chatapp.ui.commands import COMMANDS
from chatapp.ui.keys import APP_BINDINGS
from chatapp.ui.messages import ReplyProgress, ThoughtProgress, TurnFinished
from chatapp.ui.shown import shown_path
from chatapp.ui.widgets.kv_panel import KVPanel
from chatapp.ui.widgets.reply import Reply
from chatapp.ui.widgets.speed_panel import SpeedPanel
from chatapp.ui.widgets.thought import Thought
from chatapp.ui.widgets.tokens_panel import TokensPanel
from chatapp.ui.widgets.transcript import Transcript
from tests.engine.chat.thinking_templates import R1_SHAPED
from tests.gguf_copy import copies_with_templates
from tests.ui._helpers import NARROW, finished, opened, send_text, store, wait_until


@pytest.fixture(scope="module")
def default_model_path(default_model_path, tmp_path_factory):
    """make_app's model here: the default model with an R1-shaped template."""
    path = tmp_path_factory.mktemp("thinking-ui") / "r1-shaped.gguf"
    copies_with_templates(default_model_path, {path: R1_SHAPED})
    return path


def drawn(app: ChatApp) -> list:
    """The transcript's thoughts and replies, in order."""
    return [w for w in app.query("Thought, Reply") if isinstance(w, (Thought, Reply))]


async def test_the_thought_is_drawn_folded_above_its_answer(make_app):
    app, seen = make_app(incognito=True, think_budget=6, max_tokens=40)
    async with app.run_test(size=NARROW, message_hook=seen) as pilot:
        done = await send_text(pilot, app, seen, "What is the capital of France?")
        record = done.record
        assert record.thinking.strip() and record.reply.strip() and "</think>" not in record.reply
        assert seen.count(ThoughtProgress) >= 1  # drawn live, before the answer
        thought, reply = drawn(app)
        assert isinstance(thought, Thought) and isinstance(reply, Reply)
        assert thought.collapsed and not thought.streaming
        assert thought.text.strip("\n") == record.thinking.strip("\n")
        assert record.extra["thinking_closed_by"] == "budget"
        assert thought.title == f"Thought · {record.thinking_tokens} tokens · cut at the budget"
        assert reply.source == record.reply and record.thinking.strip() not in reply.source
        # drawn again from the tree, as opening a session draws it: folded above its answer
        await app.show_path(*shown_path(app.engine), anew=True)
        await pilot.pause()
        thought, reply = drawn(app)
        assert isinstance(thought, Thought) and thought.collapsed
        assert thought.text.strip("\n") == record.thinking.strip("\n") and reply.source == record.reply
        app.query_one(Transcript).scroll_to_widget(thought, animate=False)
        await pilot.pause()
        await pilot.click(thought.query_one(CollapsibleTitle))  # a click on its title unfolds it
        await wait_until(pilot, lambda: not thought.collapsed, 5)


async def test_ctrl_g_stops_the_thought_and_the_model_answers(make_app):
    assert any(b.key == "ctrl+g" and b.action == "answer_now" for b in APP_BINDINGS)
    assert any(action == "answer_now" for _, _, action in COMMANDS)
    # room for a long thought: on a busy machine many thought tokens may pass before the key lands,
    # and a turn that spends them all inside the thought never reaches its answer
    app, seen = make_app(incognito=True, max_tokens=1024)
    async with app.run_test(size=NARROW, message_hook=seen) as pilot:
        app.query_one("Composer").load_text("Tell me about the sea.")
        await pilot.press("enter")
        await wait_until(pilot, lambda: seen.count(ThoughtProgress) >= 1, 120)
        await pilot.press("ctrl+g")
        answered = lambda: any(m.text.strip() for m in seen.of(ReplyProgress)) or seen.count(TurnFinished)  # noqa: E731
        await wait_until(pilot, answered, 120)
        await pilot.press("escape")  # the answer started: enough of it (the machine may be slow)
        record = (await finished(pilot, app, seen)).record
        assert record.extra["thinking_closed_by"] == "answer now"
        assert 0 <= record.extra["answer_now_extra_tokens"] <= 1  # the key took effect at the next token
        assert record.thinking.strip() and record.reply.strip()
        thought, reply = drawn(app)
        assert thought.collapsed and reply.source == record.reply
        assert thought.title.endswith("· cut by answer now")
        assert seen.count(TurnFinished) == 1


async def test_the_panels_say_what_the_next_turn_re_prefills_before_it_is_sent(make_app):
    """The R1-shaped template drops the thought from the history: after a turn the KV panel says
    how many tokens the next one will prefill again, and why, and the Tokens panel points at where
    the next prompt parts from the cache; the next turn then prefills that many again."""
    app, seen = make_app(incognito=True, think_budget=6, max_tokens=24, thinking_history="template",
                         prefill_while_typing=False)  # typed ahead, the history would be prefilled before Enter
    async with app.run_test(size=NARROW, message_hook=seen) as pilot:
        await send_text(pilot, app, seen, "What is the capital of France?")
        figures = app.branch.figures
        assert figures.reprefill > 0 and figures.reprefill_reason == "the template drops earlier thoughts"
        kv, tokens = app.query_one(KVPanel), app.query_one(TokensPanel)
        said = kv.draw(80).plain
        assert f"next turn re-prefills {figures.reprefill} tok: the template drops earlier thoughts" in said
        assert tokens.next_break == figures.reprefill_at
        assert "the template drops earlier thoughts" in tokens._summary(80).plain
        assert "▷" in tokens.query_one("#tokens-pieces").render().plain
        record = (await send_text(pilot, app, seen, "And of Italy?")).record
        assert record.reprefill_expected == figures.reprefill
        assert abs(record.extra["reprefill_tokens"] - figures.reprefill) <= 1


async def test_keeping_thoughts_shows_nothing_to_re_prefill(make_app):
    app, seen = make_app(incognito=True, think_budget=6, max_tokens=24, thinking_history="keep",
                         prefill_while_typing=False)
    async with app.run_test(size=NARROW, message_hook=seen) as pilot:
        await send_text(pilot, app, seen, "What is the capital of France?")
        assert app.branch.figures.reprefill == 0 and app.query_one(TokensPanel).next_break is None
        assert "re-prefills" not in app.query_one(KVPanel).draw(80).plain
        record = (await send_text(pilot, app, seen, "And of Italy?")).record
        assert record.reprefill_expected == 0 and record.extra["reprefill_tokens"] == 0


@pytest.mark.parametrize("think_more, added", [(0, 6), (3, 3)])  # 0: the thinking budget's 6
async def test_ctrl_f_thinks_more_beside_the_reply_prefilling_nothing(make_app, think_more, added):
    assert any(b.key == "ctrl+f" and b.action == "think_more" for b in APP_BINDINGS)
    assert any(action == "think_more" for _, _, action in COMMANDS)
    app, seen = make_app(incognito=True, think_budget=6, max_tokens=32, prefill_while_typing=False,
                         think_more=think_more)
    async with app.run_test(size=NARROW, message_hook=seen) as pilot:
        first = (await send_text(pilot, app, seen, "What is the capital of France?")).record
        await pilot.press("ctrl+f")
        record = (await finished(pilot, app, seen, turns=2)).record
        assert record.extra["think_more"] == added and record.prefill_tokens == 0
        assert record.thinking.startswith(first.thinking.rstrip("\n")) and record.reply.strip()
        shown, _ = shown_path(app.engine)
        assert (shown[-1].position, shown[-1].siblings) == (2, 2)  # beside the first answer, which stays
        assert "kept" in app.branch.note and "up to the thought's end; prefilled 0" in app.branch.note


async def test_the_panels_count_the_thought_apart_from_the_answer(make_app):
    app, seen = make_app(incognito=True, think_budget=6, max_tokens=24, thinking_history="keep",
                         prefill_while_typing=False)
    async with app.run_test(size=NARROW, message_hook=seen) as pilot:
        record = (await send_text(pilot, app, seen, "What is the capital of France?")).record
        kv, tokens, speed = app.query_one(KVPanel), app.query_one(TokensPanel), app.query_one(SpeedPanel)
        view = app.branch.turn.view
        reply = [item for item in view if item.origin == "generated"]
        # the reply's thought (the forced close included) is "thought", its answer "assistant"
        assert sum(1 for item in reply if item.role == "thought") == record.thinking_tokens
        assert sum(1 for item in reply if item.role == "assistant") == record.decode_tokens - record.thinking_tokens
        assert kv.roles["thought"] > record.thinking_tokens  # and the opening in the generation prompt
        assert f"thought {kv.roles['thought']}" in kv.draw(80).plain
        assert f"thought {kv.roles['thought']}" in tokens._summary(80).plain
        figures = speed.figures
        assert figures["thinking"].startswith(f"thinking {record.thinking_tokens} tok")
        assert figures["answer"].startswith(f"answer {record.decode_tokens - record.thinking_tokens} tok")
        # kept in the history ("keep"), the first thought is counted as thought in the next turn too
        second = (await send_text(pilot, app, seen, "And of Italy?")).record
        assert app.query_one(KVPanel).roles["thought"] > record.thinking_tokens + second.thinking_tokens


async def test_the_speed_panel_splits_thinking_from_answer_while_the_reply_streams(make_app):
    """Live, not only once the turn is over: the thought's decode figures while it streams, then
    the answer's beside them, and the two add up to the live decode."""
    app, seen = make_app(incognito=True, think_budget=12, max_tokens=400, prefill_while_typing=False)
    async with app.run_test(size=NARROW, message_hook=seen) as pilot:
        speed = app.query_one(SpeedPanel)
        app.edit_text("Tell me about the sea.")
        await pilot.press("enter")
        await wait_until(pilot, lambda: speed.streaming and "thinking" in speed.figures, 120)
        await wait_until(pilot, lambda: speed.streaming and "answer" in speed.figures, 120)
        thought, live = speed.thought_decode, speed.live
        assert speed.figures["thinking"].startswith(f"thinking {thought.decode_tokens} tok")
        assert speed.figures["answer"].startswith(f"answer {live.decode_tokens - thought.decode_tokens} tok")
        assert "(live)" in speed._figures_text().plain
        await pilot.press("escape")
        record = (await finished(pilot, app, seen)).record
        assert speed.figures["thinking"].startswith(f"thinking {record.thinking_tokens} tok")


async def test_thinking_off_from_the_palette_is_kept_with_the_chat_and_comes_back_with_it(make_app):
    """"Thinking: off" and "Earlier thoughts: keep" before the first question: the chat, kept as a
    session at that turn, keeps both, and opening the session again in a new app brings them back."""
    assert ("Thinking: off", ) == tuple(t for t, _, a in COMMANDS if a == "think('off')")
    app, seen = make_app(think_budget=6, max_tokens=24)
    async with app.run_test(size=NARROW, message_hook=seen) as pilot:
        await app.run_action("think('off')")
        await app.run_action("thinking_history('keep')")
        assert app.engine.thinking.mode == "off" and app.engine.thinking.history == "keep"
        record = (await send_text(pilot, app, seen, "What is the capital of France?")).record
        assert record.extra["think"] == "off" and record.extra["thought_tokens_sampled"] == 0
        await wait_until(pilot, lambda: app.sessions_ui.live is not None)
        name = app.sessions_ui.live.name
        await wait_until(pilot, lambda: store().store.choices(name) == SessionChoices(think="off", history="keep"))
    again, seen = make_app(session=name, think_budget=6, max_tokens=24)
    async with again.run_test(size=NARROW, message_hook=seen) as pilot:
        await opened(pilot, seen)
        assert again.engine.thinking.mode == "off" and again.engine.thinking.history == "keep"


async def test_the_sampling_dialog_sets_a_thinking_budget(make_app):
    app, seen = make_app(incognito=True, max_tokens=48)
    async with app.run_test(size=NARROW, message_hook=seen) as pilot:
        await pilot.press("ctrl+o")
        field = await wait_for_input(pilot, app, "#think")
        assert field.value == "on"
        for typed, said in (("lots", "thinking is on, off or a budget"),
                            ("-5", "think_budget must be -1 (no budget) or 0 to"),
                            ("99999999999999999999", "got 99999999999999999999")):
            field.value = typed
            await pilot.press("enter")
            await wait_until(pilot, lambda: said in str(app.screen.query_one("#sampling-error").render()))
            assert app.engine.thinking.mode == "on"  # the dialog stays open; nothing was set
        field.value = "0"  # a budget of 0 is thinking off
        await pilot.press("enter")
        await wait_until(pilot, lambda: app.engine.thinking.mode == "off")
        await pilot.press("ctrl+o")
        field = await wait_for_input(pilot, app, "#think")
        assert field.value == "off"
        field.value = "5"
        await pilot.press("enter")
        await wait_until(pilot, lambda: app.engine.thinking.mode == "5")
        record = (await send_text(pilot, app, seen, "What is the capital of France?")).record
        assert record.extra["think_budget"] == 5 and record.extra["thinking_closed_by"] == "budget"


async def wait_for_input(pilot, app: ChatApp, selector: str):
    from textual.widgets import Input

    await wait_until(pilot, lambda: app.screen.query(selector))
    return app.screen.query_one(selector, Input)


def test_the_thought_title_counts_times_and_rates_while_it_streams_and_says_who_cut_it():
    from chatapp.ui.widgets.thought import thought_title

    assert thought_title(42, True, ms=900.0) == "Thinking… 42 tokens · 0.9 s · 47 tok/s"
    assert thought_title(0, True) == "Thinking…"
    assert thought_title(42, False, "answer now", ms=900.0) == "Thought · 42 tokens · cut by answer now"
    assert thought_title(1, False) == "Thought · 1 token"


async def test_keeping_earlier_thoughts_from_the_palette_takes_the_re_prefill_forecast_away(make_app):
    """After a turn with "template" the KV panel forecasts the re-prefill of the dropped thought;
    "Earlier thoughts: keep as generated" works the figures out anew, and there is none to say."""
    app, seen = make_app(incognito=True, think_budget=6, max_tokens=24, prefill_while_typing=False)
    async with app.run_test(size=NARROW, message_hook=seen) as pilot:
        await send_text(pilot, app, seen, "What is the capital of France?")
        assert app.branch.figures.reprefill > 0
        await app.run_action("thinking_history('keep')")
        await wait_until(pilot, lambda: app.branch.figures.reprefill == 0)
        assert "re-prefills" not in app.query_one(KVPanel).draw(80).plain
