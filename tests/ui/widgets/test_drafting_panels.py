"""Drafting and the bandwidth bound in the panels, on the real default model: the Speed panel's
figures while a reply streams and after it, and the Tokens panel's tint for accepted drafts (the
app's side, and the palette action, are tests/ui/test_drafting_ui.py).

The engine's backend verifies every draft it has (`AlwaysDraft`), so that a short reply has
accepted drafts whatever this machine's step costs say.
"""

from __future__ import annotations

from dataclasses import replace

from chatapp.engine.events import PrefillDone, TextDelta
from chatapp.engine.machine.bandwidth import MEASURING
from chatapp.engine.stats import draft_figures
from chatapp.format import percent, visible_piece
from chatapp.ui.widgets.paint import Sketch
from chatapp.ui.widgets.speed_panel import SpeedPanel
from chatapp.ui.widgets.tokens_panel import TokensPanel
from tests.ui._helpers import shown_after, wait_until
from tests.ui.widgets.hosts import Host, colour_of, static_text, styles_over


async def test_the_speed_panel_shows_drafting_and_the_roofline_live_and_after(drafted_turn, themes):
    events, record, _, summary = drafted_turn
    prefill = next(e for e in events if isinstance(e, PrefillDone))
    live = [e.live for e in events if isinstance(e, TextDelta) and e.live.draft and e.live.draft.accepted][-1]
    # The bandwidth as a machine measured before gives it (a new one's first turn: the next test).
    live = replace(live, bandwidth_gbps=7.25, bandwidth_note="")
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
        assert f"decode reads {megabytes}" in shown and "of 7.2 GB/s" in shown, shown
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
        # (a GPU backend's record has no "measuring" note: it is never measured; this CPU turn's may)
        extra = {k: v for k, v in record.extra.items() if k != "memory_bandwidth_note"}
        panel.branch = shown_after(replace(record, extra={**extra, "memory_bandwidth_gbps": None}))
        await wait_until(pilot, lambda: "memory bandwidth not measured on CUDA" in panel.query_one(
            "#speed-figures", Sketch).plain, 10)


async def test_a_new_machines_first_turn_says_its_bandwidth_is_measured_after_it(drafted_turn, themes):
    events, record, _, summary = drafted_turn
    prefill = next(e for e in events if isinstance(e, PrefillDone))
    live = replace([e.live for e in events if isinstance(e, TextDelta)][-1], bandwidth_gbps=None,
                   bandwidth_note=MEASURING)
    first = replace(record, extra={**record.extra, "memory_bandwidth_gbps": None, "memory_bandwidth_note": MEASURING})
    panel = SpeedPanel()
    async with Host(themes, panel).run_test(size=(100, 40)) as pilot:
        panel.model = summary
        for shown_as in ("live", "after"):
            if shown_as == "live":
                panel.prefill_done, panel.decode = prefill, live
            else:
                panel.prefill_done = panel.decode = None
                panel.branch = shown_after(first)
            await pilot.pause()
            shown = " ".join(panel.query_one("#speed-figures", Sketch).plain.split())
            assert f"memory bandwidth {MEASURING}" in shown, (shown_as, shown)
            assert "bandwidth alone would allow" not in shown and "not measured" not in shown


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
