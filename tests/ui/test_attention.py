"""The attention view (F9), driven through Textual's pilot against the real default model; its
snapshots in every theme use the scripted backend's made-up weights."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from textual.command import CommandPalette

from chatapp.ui.screens.attention import AttentionScreen, AttentionView
from chatapp.ui.widgets.paint import blend
from chatapp.ui.widgets.tokens_panel import TokensPanel

from tests.ui._helpers import SHIPPED_THEMES, Messages, fixed_ids, scripted_app, wait_until

pytestmark = pytest.mark.app_settings(n_ctx=512, max_tokens=8, opener=None)  # fixed threads: one reply

WIDE = (140, 44)
QUESTION = "What is the capital of France?"


async def answer(pilot, text: str = QUESTION) -> None:
    app = pilot.app
    await pilot.press(*text)
    await pilot.press("enter")
    await wait_until(pilot, lambda: not app.generating and app.engine.messages[-1].role == "assistant", 60)
    await wait_until(pilot, lambda: app.query_one(TokensPanel).turn_view, 10)


async def attention_shown(pilot, captures: int = 1, seen: Messages | None = None) -> AttentionView:
    await wait_until(pilot, lambda: isinstance(pilot.app.screen, AttentionScreen), 5)
    view = pilot.app.screen.query_one(AttentionView)
    if seen is not None:
        await wait_until(pilot, lambda: seen.count(AttentionScreen.Captured) >= captures, 60)
    await wait_until(pilot, lambda: view.pending is None and (view.map is not None or view.problem), 60)
    await pilot.pause()
    return view


async def test_f9_shows_a_reply_tokens_attention_per_layer_and_head(app):
    seen = Messages()
    async with app.run_test(size=WIDE, message_hook=seen) as pilot:
        await answer(pilot)
        await pilot.press("f9")
        view = await attention_shown(pilot, 1, seen)
        found = view.map
        assert found is not None and view.problem is None
        assert list(found.tokens) == app.engine.cached_tokens()
        first = found.reply_start
        reply = app.engine.messages[-1].content
        piece = view.tokens[first].piece  # the reply's first token (which word depends on the CPU's kernels)
        assert view.query_position == first and piece.strip() and reply.startswith(piece.strip())
        text = view.plain
        assert f"query  {piece!r} · reply token 1 of {found.reply_tokens} · position {first}" in text
        assert "layer  16 of 30 · heads averaged (9)" in text
        assert "What·is·the·capital·of·France?" in text  # the templated prompt, in the Tokens panel's style
        assert "without flash attention" in text and "with no callback" in text
        agreeing, compared = found.next_token_matches()
        assert f"The replay predicts the reply's next token at {agreeing} of {compared} rows." in text
        weights = found.weights(first, 15)
        top = int(np.argmax(weights))
        assert f"@{top} {weights[top]:.3f}" in text.split("top 5  ")[1].split("\n")[0]
        assert f"{weights[top]:.3f}" in text.split("scale  ")[1].split("\n")[0]  # the legend's top

        await pilot.press("right", "down")
        assert view.query_position == first + 1 and view.chosen_layer == 16
        assert f"reply token 2 of {found.reply_tokens}" in view.plain and "layer  17 of 30" in view.plain
        await pilot.press("right_square_bracket")  # layer 17's heads were not kept: the turn is replayed again for them
        view = await attention_shown(pilot, 2, seen)
        assert view.map.head_layer == 16 and view.chosen_head == 0 and "head 1 of 9" in view.plain
        await pilot.press("left_square_bracket")
        assert view.chosen_head == 8 and "head 9 of 9" in view.plain
        await pilot.press("a", "s")
        assert "heads averaged (9)" in view.plain and "colour = weight / largest" in view.plain

        await pilot.press("f9")
        await wait_until(pilot, lambda: not isinstance(app.screen, AttentionScreen), 5)
        await pilot.press("f9")
        await attention_shown(pilot, 3, seen)
        await pilot.press("escape")
        await wait_until(pilot, lambda: not isinstance(app.screen, AttentionScreen), 5)


async def test_the_heat_follows_the_weights(app):
    async with app.run_test(size=WIDE) as pilot:
        await answer(pilot)
        await pilot.press("f9")
        view = await attention_shown(pilot)
        position = view.query_position
        weights = view.map.weights(position, view.chosen_layer)
        strip = view.strip()
        assert len(strip.spans) == len(view.tokens)  # one span a token, in order
        styles = [span.style for span in strip.spans]
        accent = blend(view, "token-a", "accent", 1.0).bgcolor
        top = int(np.argmax(weights))
        assert [pos for pos, style in enumerate(styles) if style.bgcolor == accent] == [top]
        assert styles[position].reverse  # the query itself
        # Tokens after the query are drawn without heat, dimmed: the causal mask gave them nothing.
        assert [pos for pos, style in enumerate(styles) if style.dim] == list(range(position + 1, len(styles)))
        # Each earlier token's shade is its weight on the square-root scale, between the Tokens
        # panel's alternating shades (no weight) and the accent (the largest).
        for pos in range(position + 1):
            share = float(np.sqrt(weights[pos] / weights[top]))
            assert styles[pos].bgcolor == blend(view, ("token-a", "token-b")[pos % 2], "accent", share).bgcolor


async def test_a_reply_token_selected_in_the_tokens_panel_opens_at_that_token(app):
    async with app.run_test(size=WIDE) as pilot:
        await answer(pilot)
        panel = app.query_one(TokensPanel)
        panel.focus()
        panel.select(len(panel.turn_view) - 2)  # the reply's second-to-last token
        await pilot.press("f9")
        view = await attention_shown(pilot)
        assert view.query_position == len(panel.turn_view) - 2
        assert view.tokens[view.query_position].piece == panel.selected_token.piece


async def test_the_palette_opens_the_attention_view(app):
    async with app.run_test(size=WIDE) as pilot:
        await answer(pilot)
        await pilot.press("ctrl+p")
        assert isinstance(app.screen, CommandPalette)
        await pilot.press(*"attention in the last")
        await pilot.pause(0.5)
        await pilot.press("enter")
        assert (await attention_shown(pilot)).map is not None


async def test_before_any_turn_the_view_says_there_is_nothing_to_show(app):
    async with app.run_test(size=WIDE) as pilot:
        await pilot.press("f9")
        view = await attention_shown(pilot)
        assert view.map is None and view.plain == "no turn to look at yet: send a message first"


@pytest.mark.parametrize("theme", SHIPPED_THEMES)
def test_attention_screen(snap_compare, default_model_path, monkeypatch, theme):
    """The scripted backend's made-up weights go through the real collector and view; the
    replay's clock is scripted too, so the figures are the same on every run."""
    ticks = itertools.count()
    monkeypatch.setattr("chatapp.engine.chat.engine.time.perf_counter", lambda: next(ticks) * 0.004)
    monkeypatch.setattr("chatapp.engine.inside.attention.time.perf_counter", lambda: 0.0)
    fixed_ids(monkeypatch)  # the transcript behind the view shows each message's id

    async def open_attention(pilot):
        for widget in pilot.app.query("TextArea"):
            widget.cursor_blink = False
        await pilot.press(*"How does inference work?")
        await pilot.press("enter")
        await wait_until(pilot, lambda: pilot.app.engine.messages[-1].role == "assistant", 10)
        await pilot.app.workers.wait_for_complete()
        await pilot.press("f9")
        await attention_shown(pilot)
        await pilot.press("right", "right", "right")

    assert snap_compare(scripted_app(default_model_path, theme), run_before=open_attention, terminal_size=(120, 40))
