"""The views inside the next token in the TUI (palette: surprise, logit lens, sampler chain),
through Textual's pilot against the real default model."""

from __future__ import annotations

import pytest
from textual.command import CommandPalette

from chatapp.engine.inside.lens import Lens
from chatapp.engine.inside.sampler_chain import ChainReplay
from chatapp.engine.inside.surprise import QuantCost, Surprise
from chatapp.ui.screens.model_picker import ModelPickerScreen
from chatapp.ui.screens.next_token import NextTokenScreen, NextTokenView
from chatapp.ui.widgets.tokens_panel import TokensPanel

from tests.ui._helpers import wait_until

pytestmark = pytest.mark.app_settings(n_ctx=512, max_tokens=8, opener=None, temperature=0.8, seed=5)

WIDE = (140, 44)


async def answer(pilot, text: str = "What is the capital of France?") -> None:
    app = pilot.app
    await pilot.press(*text)
    await pilot.press("enter")
    await wait_until(pilot, lambda: not app.generating and app.engine.messages[-1].role == "assistant", 60)
    await wait_until(pilot, lambda: app.query_one(TokensPanel).turn_view, 10)


async def shown(pilot, words: str, *, pick_model: bool = False) -> NextTokenView:
    await pilot.press("ctrl+p")
    assert isinstance(pilot.app.screen, CommandPalette)
    await pilot.press(*words)
    await pilot.pause(0.5)
    await pilot.press("enter")
    if pick_model:
        await wait_until(pilot, lambda: isinstance(pilot.app.screen, ModelPickerScreen), 30)
        assert pilot.app.screen.frame_title == "Compare with another quant"
        await pilot.press("enter")
    await wait_until(pilot, lambda: isinstance(pilot.app.screen, NextTokenScreen), 5)
    view = pilot.app.screen.query_one(NextTokenView)
    await wait_until(pilot, lambda: view.pending is None, 120)
    await pilot.pause()
    return view


async def test_the_palette_shows_surprise_lens_and_sampler_chain_of_the_last_turn(app):
    async with app.run_test(size=WIDE) as pilot:
        await answer(pilot)
        cached = app.engine.cached_tokens()
        tokens, start = app.engine.last_turn()

        view = await shown(pilot, "surprise of the")
        assert isinstance(view.found, Surprise), view.problem
        assert list(view.found.ids) == cached and view.found.scored == len(cached) - 1
        assert "shaded by its surprise" in view.plain and "perplexity" in view.plain
        await pilot.press("escape")

        view = await shown(pilot, "logit lens")
        assert isinstance(view.found, Lens), view.problem
        last = len(tokens) - 1
        assert view.found.position == last - 1 and view.found.token == tokens[last]
        assert view.found.last_layer_gap < 1e-3 and len(view.found.layers) == app.engine.summary.n_layer
        assert "llama.cpp's logits" in view.plain
        await pilot.press("left")
        await wait_until(pilot, lambda: view.pending is None and view.found.position == last - 2, 60)
        await pilot.press("escape")

        view = await shown(pilot, "sampler chain")
        found = view.found
        assert isinstance(found, ChainReplay), view.problem
        assert found.matches == (len(tokens) - start, len(tokens) - start)  # seed 5: the turn's own draws
        assert [s.name for s in found.steps[0].stages] == ["top_k", "top_p", "min_p", "temperature", "dist"]
        assert "top_k" in view.plain and f"at {len(tokens) - start} of {len(tokens) - start} positions" in view.plain
        await pilot.press("escape")

        # the loaded model picked as its own second quant: the wiring end to end, every token the same
        # (tests/engine/inside/test_next_token.py compares a real Q3_K_S)
        view = await shown(pilot, "quantization cost", pick_model=True)
        assert isinstance(view.found, QuantCost), view.problem
        assert list(view.found.base.ids) == app.engine.cached_tokens() and view.found.kld_mean < 1e-6
        name = app.engine.summary.path.rsplit("/", 1)[-1]
        assert "KLD < 0.01" in view.plain and f"{name}: 93.8 MiB, decodes" in view.plain
        assert "the same top token at 100.0%" in view.plain


async def test_before_any_turn_the_views_say_so(app):
    async with app.run_test(size=WIDE) as pilot:
        view = await shown(pilot, "logit lens")
        assert view.found is None and "send a message first" in view.plain
