"""Drafting and the bandwidth bound in the TUI, on the real default model: the Speed panel's
figures while a reply streams and after it, the Tokens panel's tint for accepted drafts, and
the palette action that turns drafting on and off.

The engine's backend verifies every draft it has (`AlwaysDraft`), so that a short reply has
accepted drafts whatever this machine's step costs say.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from chatapp.config import Settings
from chatapp.engine.chat.engine import Engine
from chatapp.engine.events import PrefillDone, TextDelta, TurnDone
from chatapp.engine.local.llama import LlamaRuntime, LoadOptions
from chatapp.engine.local.backend import LocalBackend
from chatapp.engine.stats import draft_figures
from chatapp.format import percent
from chatapp.ui.app import ChatApp
from chatapp.ui.commands import COMMANDS
from chatapp.ui.messages import ReplyProgress, TurnFinished
from chatapp.ui.widgets.paint import Sketch
from chatapp.ui.widgets.speed_panel import SpeedPanel
from chatapp.ui.widgets.tokens_panel import TokensPanel
from chatapp.format import visible_piece
from tests.engine.drafting.always_draft import AlwaysDraft
from tests.engine.local.speculative import PROMPTS, known_exact
from tests.ui._helpers import Messages, notified, shown_after, wait_until
from tests.ui.widgets.test_panels import Host, colour_of, static_text, styles_over

SETTINGS = Settings(n_ctx=1024, temperature=0.0, max_tokens=64, draft="ngram")


def drafting_engine(model_path) -> Engine:
    runtime = LlamaRuntime(model_path, LoadOptions(n_ctx=SETTINGS.n_ctx, n_threads=1, n_threads_batch=1,
                                                   flash_attn=True))
    known_exact(runtime)  # as an earlier turn leaves it: the first turn here drafts
    return Engine(LocalBackend(runtime, draft_policy=AlwaysDraft(k_max=8)), SETTINGS)


@pytest.fixture(scope="module")
def drafted_turn(default_model_path):
    """A copy-heavy turn with drafting: its events, record and token view."""
    engine = drafting_engine(default_model_path)
    events = list(engine.send(PROMPTS["copy"]))
    done = events[-1]
    assert isinstance(done, TurnDone)
    view, summary = done.view, engine.summary
    engine.close()
    return events, done.record, view, summary


@pytest.fixture(scope="module")
def themes(tmp_path_factory):
    from chatapp.ui.themes import load_themes

    return load_themes(user_dir=tmp_path_factory.mktemp("no-user-themes"))


async def test_the_speed_panel_shows_drafting_and_the_roofline_live_and_after(drafted_turn, themes):
    events, record, _, summary = drafted_turn
    prefill = next(e for e in events if isinstance(e, PrefillDone))
    live = [e.live for e in events if isinstance(e, TextDelta) and e.live.draft and e.live.draft.accepted][-1]
    panel = SpeedPanel()
    async with Host(themes, panel).run_test(size=(100, 40)) as pilot:
        panel.prefill_done, panel.decode = prefill, live
        await pilot.pause()
        shown = panel.query_one("#speed-figures", Sketch).plain
        draft = live.draft
        assert f"drafts {draft.drafted} tok, {draft.accepted} accepted ({percent(draft.acceptance)})" in shown
        per_step = draft.tokens_per_step
        assert f"{per_step:.2f} tok per decode step (+{per_step - 1:.2f} from drafts)" in shown
        assert "accepted by position: " + " ".join(percent(a / d) for a, d in draft.by_position[:8]) in shown
        # The estimate needs a timed plain step: AlwaysDraft may have drafted from the very first.
        assert (f"×{draft.speedup:.2f} against plain steps" in shown) == (draft.speedup > 0)
        megabytes = f"{(live.bytes_per_token) / 2**20:.1f} MiB/token"
        # The panel gives a bandwidth below 10 GB/s to one decimal (a loaded machine measures such).
        assert f"decode reads {megabytes}" in shown
        assert any(f"of {live.bandwidth_gbps:{spec}} GB/s" in shown for spec in (".0f", ".1f")), shown
        assert "bandwidth alone would allow ~" in shown and "prefill needs ~0.27 GFLOP/token" in shown
        assert all(value in shown for value in panel.figures.values())

        panel.prefill_done = panel.decode = None
        panel.branch = shown_after(record)
        await pilot.pause()
        shown = panel.query_one("#speed-figures", Sketch).plain
        final = draft_figures(record)
        assert "(live)" not in shown and final.accepted >= draft.accepted
        assert f"drafts {final.drafted} tok, {final.accepted} accepted" in shown
        assert f"decode reads {record.extra['decode_bytes_per_token'] / 2**20:.1f} MiB/token" in shown
        assert all(value in shown for value in panel.figures.values())

        # On a GPU the bandwidth is not measured: the panel says so rather than guess.
        panel.model = replace(summary, backend="CUDA")
        panel.branch = shown_after(replace(record, extra={**record.extra, "memory_bandwidth_gbps": None}))
        await pilot.pause()
        assert "memory bandwidth not measured on CUDA" in panel.query_one("#speed-figures", Sketch).plain


async def test_a_turn_that_could_not_draft_says_why(drafted_turn, themes):
    _, record, _, summary = drafted_turn
    why = "flash attention is off (flash_attn = off)"
    plain = replace(record, extra={**record.extra, "draft": "off", "draft_off_because": why})
    panel = SpeedPanel()
    async with Host(themes, panel).run_test(size=(100, 40)) as pilot:
        panel.branch = shown_after(plain)
        await pilot.pause()
        shown = panel.query_one("#speed-figures", Sketch).plain
        assert f"drafting off: {why}" in shown and "drafts " not in shown


async def test_the_speed_panel_says_what_was_chosen_so_that_drafts_stay_exact(drafted_turn, themes):
    _, record, _, summary = drafted_turn
    chosen = "KV cache q8_0 instead of f16, so verify batches are exact"
    panel = SpeedPanel()
    async with Host(themes, panel).run_test(size=(100, 40)) as pilot:
        panel.branch = shown_after(replace(record, extra={**record.extra, "draft_config": chosen}))
        await pilot.pause()
        assert chosen in panel.query_one("#speed-figures", Sketch).plain


async def test_the_tokens_panel_tints_the_tokens_that_came_from_drafts(drafted_turn, themes):
    _, record, view, summary = drafted_turn
    drafted = [item for item in view if item.drafted]
    assert drafted and all(item.origin == "generated" for item in drafted)
    panel = TokensPanel()
    async with Host(themes, panel).run_test(size=(100, 40)) as pilot:
        panel.branch = shown_after(record, view)
        await pilot.pause()
        assert f"from drafts {len(drafted)}" in panel.query_one("#tokens-summary", Sketch).plain
        pieces = static_text(panel, "#tokens-pieces")
        tints = {colour_of(panel.app, "token-drafted-a").lower(), colour_of(panel.app, "token-drafted-b").lower()}
        at = 0
        for item in view:
            shown = visible_piece(item.token.piece) or "∅"
            backgrounds = {str(s.bgcolor.name).lower() for s in styles_over(pieces, at, at + len(shown)) if s.bgcolor}
            assert bool(backgrounds & tints) == item.drafted, item
            at += len(shown)


async def test_the_app_shows_drafting_live_and_the_palette_turns_it_off_and_on(default_model_path):
    assert any(action == "toggle_drafting" for _, _, action in COMMANDS)
    engine = drafting_engine(default_model_path)
    app, seen = ChatApp(engine, settings=SETTINGS), Messages()
    try:
        async with app.run_test(size=(140, 50), message_hook=seen) as pilot:
            app.query_one("#composer").load_text(PROMPTS["copy"])
            await pilot.press("enter")
            await wait_until(pilot, lambda: seen.count(TurnFinished) == 1 and not app.generating, 120)
            finished = seen.of(TurnFinished)[0]
            live = [m.live for m in seen.of(ReplyProgress) if m.live.draft is not None]
            assert live, "the reply's updates carry the drafting figures"
            figures = app.query_one(SpeedPanel).figures
            final = draft_figures(finished.record)
            assert final.accepted > 0 and figures["drafts"].startswith(f"drafts {final.drafted} tok")
            assert "roofline" in figures and "prefill_compute" in figures
            tokens = app.query_one(TokensPanel)
            tinted = sum(item.drafted for item in tokens.turn_view)
            assert tinted > 0 and f"from drafts {tinted}" in tokens.query_one("#tokens-summary", Sketch).plain

            await app.run_action("toggle_drafting")
            assert engine.drafting.mode == "off"
            await notified(pilot, seen, lambda n: n.message == "drafting off")
            await app.run_action("toggle_drafting")
            assert engine.drafting.active
            await notified(pilot, seen, lambda n: n.message == "drafting on: prompt lookup, up to 32 tokens a step")
    finally:
        app.release_engine()
