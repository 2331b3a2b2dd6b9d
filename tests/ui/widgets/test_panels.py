"""The four live panels and the reply widget, each in a tiny host App, fed with a real model's turns."""

from __future__ import annotations

from dataclasses import replace

import pytest
from rich.style import Style
from rich.text import Text
from textual.widgets import Sparkline

from chatapp.engine.chat import prompt_view
from chatapp.engine.opening import open_engine
from chatapp.engine.models.quant import model_info
from chatapp.format import human_bytes, visible_piece
from chatapp.ui.widgets.kv_panel import KVPanel
from chatapp.ui.widgets.paint import Sketch, theme_colour
from chatapp.ui.widgets.quant_panel import QuantPanel
from chatapp.ui.widgets.reply import Reply
from chatapp.ui.widgets.speed_panel import SpeedPanel
from chatapp.ui.widgets.tokens_panel import WINDOW, TokensPanel
from tests.ui._helpers import shown_after
from tests.ui.widgets.hosts import Host, SETTINGS, colour_of, static_text, styles_over

COMPOSER_TEXT = "Hello <|im_start|> world\n\tindented  twice"


# --- speed -------------------------------------------------------------------------------
async def test_speed_panel_shows_live_figures_then_the_records(session, themes):
    panel = SpeedPanel()
    async with Host(themes, panel).run_test(size=(80, 24)) as pilot:
        first = session.turns[0]
        panel.prefill_done = first.prefill
        await pilot.pause()
        shown = panel.query_one("#speed-figures", Sketch).plain
        assert f"prefill {first.prefill.prefill_tokens} tok" in shown
        assert f"{first.prefill.prefill_tps:,.1f} tok/s" in shown
        live = first.deltas[-1].live
        panel.decode = live
        await pilot.pause()
        shown = panel.query_one("#speed-figures", Sketch).plain
        assert f"decode {live.decode_tokens} tok (live)" in shown
        assert f"{live.decode_tps:,.1f} tok/s" in shown

        panel.prefill_done = panel.decode = None  # the turn is over
        for turn in session.turns:
            panel.branch = shown_after(turn.record, branch=panel.branch)
        await pilot.pause()
        record = session.turns[-1].record
        assert panel.last_record is record
        shown = panel.query_one("#speed-figures", Sketch).plain
        assert "(live)" not in shown
        for figure in (f"prefill {record.prefill_tokens} tok, {record.cached_tokens} cached",
                       f"{record.prefill_ms:,.1f} ms · {record.prefill_tps:,.1f} tok/s",
                       f"first token {record.ttft_ms:,.1f} ms",
                       f"decode {record.decode_tokens} tok",
                       f"{record.decode_ms:,.1f} ms · {record.decode_tps:,.1f} tok/s",
                       f"finished: {record.finish_reason}"):
            assert figure in shown
        assert all(value in shown for value in panel.figures.values())
        decode = panel.query_one("#decode-history", Sparkline)
        assert list(decode.data) == [t.record.decode_tps for t in session.turns]
        rates = [t.record.decode_tps for t in session.turns]
        assert f"decode tok/s {min(rates):,.0f}–{max(rates):,.0f}" in static_text(panel, "#decode-label").plain
        assert panel.border_subtitle == "last 3 turns"


async def test_a_turn_that_prefilled_nothing_is_not_plotted_as_a_speed_of_0(session, themes):
    """All cached or prefilled while typing: the turn has no prefill speed, so the history leaves
    it out and says so ("prefill tok/s 0–0" over a full bar read as a stalled machine)."""
    panel = SpeedPanel()
    async with Host(themes, panel).run_test(size=(80, 24)) as pilot:
        first, second = session.turns[0].record, session.turns[1].record
        nothing = replace(second, prefill_tokens=0, cached_tokens=second.prompt_tokens, prefill_ms=0.0)
        assert nothing.prefill_tps == 0  # what the history plotted
        for record in (first, nothing):
            panel.branch = shown_after(record, branch=panel.branch)
        await pilot.pause()
        assert list(panel.query_one("#prefill-history", Sparkline).data) == [first.prefill_tps]
        label = static_text(panel, "#prefill-label").plain
        assert label == f"prefill tok/s {first.prefill_tps:,.0f}–{first.prefill_tps:,.0f} · 1 turn computed none"
        assert len(panel.query_one("#decode-history", Sparkline).data) == 2  # both decoded


async def test_speed_panel_says_how_many_llama_cpp_threads_ran_and_why(session, themes):
    turn = session.turns[0]
    live, extra = turn.deltas[-1].live, turn.record.extra
    assert live.threads >= 1 and live.threads_reason  # what the engine said while decoding
    assert isinstance(extra["threads"], int) and extra["threads"] >= 1 and extra["threads_reason"]
    panel = SpeedPanel()
    async with Host(themes, panel).run_test(size=(80, 24)) as pilot:
        panel.prefill_done, panel.decode = turn.prefill, live
        await pilot.pause()
        line = f"{live.threads} thread{'s' if live.threads != 1 else ''}: {live.threads_reason}"
        assert panel.figures["threads"] == line
        assert f"  {line}" in panel.query_one("#speed-figures", Sketch).plain.split("\n")

        panel.prefill_done = panel.decode = None
        panel.branch = shown_after(turn.record)
        await pilot.pause()
        n = extra["threads"]
        line = f"{n} thread{'s' if n != 1 else ''}: {extra['threads_reason']}"
        assert panel.figures["threads"] == line
        assert f"  {line}" in panel.query_one("#speed-figures", Sketch).plain.split("\n")


# --- KV ----------------------------------------------------------------------------------
def assert_height_fits(panel) -> None:
    """The panel's box holds exactly its drawn lines (plus the border), after any update."""
    width = panel.content_size.width
    lines = panel.drawn(width).wrap(panel.app.console, width)
    assert panel.content_size.height == len(lines)


async def test_kv_panel_grows_by_each_turns_tokens(session, themes):
    summary = session.engine.summary
    panel = KVPanel()
    async with Host(themes, panel).run_test(size=(80, 24)) as pilot:
        panel.model = summary
        first, second = session.turns[:2]
        for delta in first.deltas:
            panel.live_cells = delta.live.kv_used
        await pilot.pause()
        assert f"{first.deltas[-1].live.kv_used} / 1,024 cells" in panel.plain
        assert "decoding…" in panel.plain
        assert_height_fits(panel)

        panel.live_cells = None
        panel.branch = shown_after(first.record, first.view)
        await pilot.pause()
        used_after_first = panel.kv_used
        assert_height_fits(panel)
        assert f"{first.record.kv_used} / 1,024 cells" in panel.plain
        assert f"this turn wrote: {first.record.kv_used} cells" in panel.plain  # the system prompt too
        assert f"{human_bytes(first.record.kv_used * summary.kv_bytes_per_token)} of " \
               f"{human_bytes(1024 * summary.kv_bytes_per_token)} (f16, " in panel.plain

        panel.branch = shown_after(second.record, second.view, panel.branch)
        await pilot.pause()
        assert second.record.cached_tokens == first.record.kv_used  # the whole first turn was reused
        grew = second.record.prefill_tokens + second.record.decode_tokens
        assert panel.kv_used - used_after_first == grew
        text = panel.plain
        assert f"{used_after_first + grew} / 1,024 cells" in text
        assert f"this turn wrote: {grew} cells" in text
        assert f"reused from cache: {second.record.cached_tokens} tok" in text
        counts = prompt_view.role_counts(second.view)
        for role in prompt_view.ROLES:
            if role == "retrieved":  # listed only when attachment text is in the cache
                assert counts[role] == 0 and "retrieved" not in text
            else:
                assert f"{role} {counts[role]}" in text
        free = 1024 - second.record.kv_used
        once = prompt_view.written_once(first.view)  # the system prompt: the second turn wrote it no more
        assert once == prompt_view.role_counts(first.view)["system"] > 0
        average = (first.record.kv_used - once + grew) / 2
        assert panel.forecast == int(free // average)
        assert f"room for ~{panel.forecast} more turns (~{round(average)} tok each)" in text
        assert not panel.has_class("-warn") and not panel.has_class("-critical")
        # The bar spans the panel's width; each role's cells wear its theme colour.
        bar = panel.drawn(panel.content_size.width).split("\n")[0]
        assert bar.cell_len == panel.content_size.width
        colours = {str(span.style.color.name) for span in bar.spans}
        assert colour_of(panel.app, "kv-user") in colours and colour_of(panel.app, "kv-free") in colours


async def test_kv_panel_warns_at_80_and_95_percent(session, themes):
    real = session.turns[0].record
    panel = KVPanel()
    async with Host(themes, panel).run_test(size=(80, 24)) as pilot:
        panel.model = session.engine.summary
        panel.branch = shown_after(replace(real, kv_used=819, cached_tokens=0), session.turns[0].view)  # 79.98%
        await pilot.pause()
        assert not panel.has_class("-warn") and "▲" not in panel.plain
        panel.live_cells = 820
        await pilot.pause()
        assert panel.has_class("-warn") and not panel.has_class("-critical")
        assert "▲ cache 80% full" in panel.plain
        assert_height_fits(panel)
        panel.live_cells = None
        panel.branch = shown_after(replace(real, kv_used=973, cached_tokens=900), session.turns[0].view)  # 95.02%
        await pilot.pause()
        assert panel.has_class("-critical") and not panel.has_class("-warn")
        assert "▲ cache 95% full: the oldest turns will be dropped" in panel.plain
        panel.branch = shown_after(real, session.turns[0].view)
        await pilot.pause()
        assert not panel.has_class("-warn") and not panel.has_class("-critical")
        assert "▲" not in panel.plain
        assert_height_fits(panel)


# --- tokens ------------------------------------------------------------------------------
async def test_tokens_panel_counts_what_the_tokenizer_counts(session, themes):
    tokens = session.engine.tokenize(COMPOSER_TEXT)
    panel = TokensPanel()
    async with Host(themes, panel).run_test(size=(80, 24)) as pilot:
        panel.composer_tokens = tuple(tokens)
        await pilot.pause()
        assert panel.mode == "composer"
        summary = panel.query_one("#tokens-summary", Sketch).plain
        assert f"{len(tokens)} tokens" in summary and f"{len(COMPOSER_TEXT)} chars" in summary
        pieces = static_text(panel, "#tokens-pieces")
        assert pieces.plain == visible_piece(COMPOSER_TEXT)
        assert "·" in pieces.plain and "↵" in pieces.plain and "→" in pieces.plain
        # Neighbouring tokens take alternate backgrounds.
        backgrounds = [str(span.style.bgcolor.name) for span in pieces.spans[:2]]
        assert backgrounds == [colour_of(panel.app, "token-a"), colour_of(panel.app, "token-b")]

        panel.toggle_ids()
        await pilot.pause()
        subscript = str(tokens[0].id).translate(str.maketrans("0123456789", "₀₁₂₃₄₅₆₇₈₉"))
        assert static_text(panel, "#tokens-pieces").plain.startswith(visible_piece(tokens[0].piece) + subscript)
        panel.toggle_ids()

        # The templated prompt's special tokens are marked, in either view.
        view = session.turns[0].view
        panel.composer_tokens = tuple(item.token for item in view)
        await pilot.pause()
        assert_specials_marked(panel, static_text(panel, "#tokens-pieces"), [item.token for item in view])


def assert_specials_marked(panel, pieces: Text, tokens) -> None:
    special = colour_of(panel.app, "token-special")
    at = 0
    assert any(t.special for t in tokens)
    for token in tokens:
        shown = visible_piece(token.piece)
        colours = {str(s.color.name) for s in styles_over(pieces, at, at + len(shown)) if s.color}
        assert (special in colours) == token.special, token
        at += len(shown)


async def test_tokens_panel_shows_the_turn_by_origin(session, themes):
    turn = session.turns[1]
    panel = TokensPanel()
    async with Host(themes, panel).run_test(size=(80, 24)) as pilot:
        panel.composer_tokens = tuple(session.engine.tokenize("draft"))
        panel.branch = shown_after(turn.record, turn.view)
        await pilot.pause()
        assert panel.mode == "turn"
        summary = panel.query_one("#tokens-summary", Sketch).plain
        record = turn.record
        assert f"{len(turn.view)} tokens in the cache" in summary
        assert f"cached {record.cached_tokens}" in summary
        assert f"prefilled {record.prefill_tokens}" in summary
        assert f"generated {len(turn.view) - record.prompt_tokens}" in summary
        assert "prefix reuse broke" not in summary
        pieces = static_text(panel, "#tokens-pieces")
        assert_specials_marked(panel, pieces, [item.token for item in turn.view])
        origin_colour = {"cached": "token-cached", "prefilled": "token-prefill", "generated": "token-generated"}
        at = 0
        for item in turn.view:
            shown = visible_piece(item.token.piece)
            if not item.token.special:
                colours = {str(s.color.name) for s in styles_over(pieces, at, at + len(shown)) if s.color}
                assert colour_of(panel.app, origin_colour[item.origin]) in colours
            at += len(shown)

        panel.composer_tokens = ()  # an emptied composer keeps the turn in view
        assert panel.mode == "turn"
        panel.composer_tokens = tuple(session.engine.tokenize("next"))
        assert panel.mode == "composer"
        panel.toggle_mode()
        assert panel.mode == "turn"


async def test_tokens_panel_shows_the_newest_turn_when_it_comes_into_view(session, themes):
    """At 100x30 the panels share one tab: the newest turn, which ended while the Tokens tab was
    hidden, is what the tab shows when it opens (it showed the top of the cache, the system prompt)."""
    turn = session.turns[1]
    panel = TokensPanel()
    async with Host(themes, panel).run_test(size=(60, 12)) as pilot:
        panel.display = False
        panel.branch = shown_after(turn.record, turn.view)
        await pilot.pause()
        panel.display = True
        await pilot.pause()
        await pilot.pause()
        assert panel.max_scroll_y > 0 and panel.scroll_y == panel.max_scroll_y


async def test_tokens_panel_points_at_where_prefix_reuse_broke(session, themes):
    turn = session.turns[2]
    broken = turn.record.reuse_broken_at
    assert broken is not None and turn.record.cached_tokens == broken
    panel = TokensPanel()
    async with Host(themes, panel).run_test(size=(80, 24)) as pilot:
        panel.branch = shown_after(turn.record, turn.view)
        await pilot.pause()
        piece = visible_piece(turn.view[broken].token.piece)
        assert f"prefix reuse broke at token {broken}: {piece!r}" in panel.query_one("#tokens-summary", Sketch).plain
        before = "".join(visible_piece(item.token.piece) for item in turn.view[:broken])
        assert static_text(panel, "#tokens-pieces").plain.startswith(before + "▶" + piece)


async def test_tokens_panel_takes_10000_characters(session, themes):
    text = ("The quick brown fox jumps over the lazy dog.\n\tAnd then some more words. " * 150)[:10_000]
    tokens = session.engine.tokenize(text)
    assert len(tokens) > WINDOW
    panel = TokensPanel()
    async with Host(themes, panel).run_test(size=(80, 24)) as pilot:
        panel.composer_tokens = tuple(tokens)
        await pilot.pause()
        summary = panel.query_one("#tokens-summary", Sketch).plain
        assert f"{len(tokens):,} tokens" in summary and f"showing the last {WINDOW:,}" in summary
        pieces = static_text(panel, "#tokens-pieces").plain
        assert pieces == visible_piece("".join(t.piece for t in tokens[-WINDOW:]))


# --- quant -------------------------------------------------------------------------------
async def test_quant_panel_shows_the_mix_and_weights_against_kv(session, themes, default_model_path):
    summary = session.engine.summary
    panel = QuantPanel()
    async with Host(themes, panel).run_test(size=(80, 24)) as pilot:
        panel.model = summary
        await pilot.pause()
        assert "scanning tensors…" in panel.plain and "Q4_1" in panel.plain and "f16" in panel.plain

        info = model_info(default_model_path)
        panel.model_info = info
        panel.branch = shown_after(session.turns[0].record)
        await pilot.pause()
        text = panel.plain
        assert "scanning" not in text
        assert f"Q4_1 · {info.bits_per_weight:.2f} bits/weight" in text
        assert "q4_1 " in text and "q8_0 " in text
        assert f"weights  {human_bytes(info.weight_bytes)}" in text
        kv_now = session.turns[0].record.kv_used * summary.kv_bytes_per_token
        assert f"KV now   {human_bytes(kv_now)}" in text
        assert f"KV full  {human_bytes(1024 * summary.kv_bytes_per_token)}" in text
        assert "KV at full context is" in text and ">" not in text  # 1,024 cells fit well inside

    # At the model's trained context, the cache outgrows the weights.
    big = open_engine(SETTINGS.replace(n_ctx=info.context_length), str(default_model_path))
    try:
        panel = QuantPanel()
        async with Host(themes, panel).run_test(size=(80, 24)) as pilot:
            panel.model, panel.model_info = big.summary, info
            await pilot.pause()
            full = big.summary.n_ctx * big.summary.kv_bytes_per_token
            assert full > info.weight_bytes
            assert f"KV at full context ({human_bytes(full)}) > weights ({human_bytes(info.weight_bytes)})" \
                in panel.plain
    finally:
        big.close()


# --- every panel, narrow and wide, under every theme ---------------------------------------
def feed_all(session, info, tokens: TokensPanel, kv: KVPanel, speed: SpeedPanel, quant: QuantPanel) -> None:
    summary = session.engine.summary
    quant.model, quant.model_info, kv.model, speed.model = summary, info, summary, summary
    branch = None
    for turn in session.turns:  # as the App hands each turn's branch down to every panel
        speed.prefill_done = turn.prefill
        speed.prefill_done = None
        branch = shown_after(turn.record, turn.view, branch)
        kv.branch = speed.branch = quant.branch = tokens.branch = branch


@pytest.mark.parametrize("size", [(30, 24), (80, 24), (140, 50)])
async def test_every_panel_renders_under_every_theme(session, themes, default_model_path, size):
    panels = TokensPanel(), KVPanel(), SpeedPanel(), QuantPanel()
    app = Host(themes, *panels)
    async with app.run_test(size=size) as pilot:
        feed_all(session, model_info(default_model_path), *panels)
        for theme in themes.themes:
            app.theme = theme.name
            await pilot.pause()
            assert app.export_screenshot()  # paints every widget
            tokens, kv, _, quant = panels
            pieces = static_text(tokens, "#tokens-pieces")
            assert str(pieces.spans[0].style.bgcolor.name) == theme.variables["token-a"]
            width = kv.content_size.width
            assert 0 < width <= size[0]
            bar = kv.drawn(width).split("\n")[0]
            assert bar.cell_len == width
            assert theme.variables["kv-free"] in {str(s.style.color.name) for s in bar.spans}
            assert quant.plain and kv.plain


async def test_panels_paint_under_textuals_ansi_themes(session, themes, default_model_path):
    panels = TokensPanel(), KVPanel(), SpeedPanel(), QuantPanel()
    app = Host(themes, *panels)
    async with app.run_test(size=(140, 50)) as pilot:
        feed_all(session, model_info(default_model_path), *panels)
        ansi = [name for name in app.available_themes if name.startswith("ansi")]
        assert ansi
        for name in ansi:
            app.theme = name
            await pilot.pause()
            assert app.export_screenshot()
            assert panels[1].plain and panels[3].plain


# --- the reply -----------------------------------------------------------------------------
def styled(reply: Reply, text: str) -> Style:
    """The style of the first segment on screen holding `text`."""
    segments = (segment for y in range(reply.size.height) for segment in reply.render_line(y))
    return next(s.style for s in segments if text in s.text)


async def test_a_reply_is_one_widget_drawn_in_the_theme_colours(session, themes):
    real = session.turns[0].record.reply
    reply = Reply(f"{real}\n\n## Notes\n\n- call `sorted()` here\n- or not\n\n```python\nprint(1)\n```\n")
    async with Host(themes, reply).run_test(size=(80, 40)) as pilot:
        await pilot.pause()
        assert not reply.children  # one widget, however many Markdown blocks
        assert real.split()[0] in "".join(reply.render_line(y).text for y in range(reply.size.height))
        app = pilot.app
        assert styled(reply, "sorted()").color == theme_colour(reply, "text-accent")
        assert styled(reply, "Notes").color == theme_colour(reply, "markdown-h2-color")
        dark_accent = theme_colour(reply, "text-accent")
        app.theme = "chatapp-light"
        await pilot.pause()
        assert theme_colour(reply, "text-accent") != dark_accent
        assert styled(reply, "sorted()").color == theme_colour(reply, "text-accent")
