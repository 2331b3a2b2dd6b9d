"""The confidence view in the widgets that draw it: reply tokens shaded by probability in the
Tokens panel and in a reply, and a reply token's alternatives; on the real model's turns (the
app's side, through its key, is tests/ui/test_confidence.py)."""

from __future__ import annotations

from chatapp.engine.sampling import BANDS, band, confidence
from chatapp.ui.widgets.confidence import band_styles, shaded_reply
from chatapp.ui.widgets.paint import Sketch
from chatapp.ui.widgets.reply import Reply
from chatapp.ui.widgets.tokens_panel import TokensPanel
from tests.ui._helpers import shown_after
from tests.ui.widgets.hosts import Host, static_text, styles_over


async def test_the_tokens_panel_shades_reply_tokens_and_shows_a_selected_one_s_alternatives(turn, themes):
    record = turn.record
    assert len(record.probs) == record.generated_tokens
    panel = TokensPanel()
    async with Host(themes, panel).run_test(size=(100, 40)) as pilot:
        panel.branch = shown_after(record, turn.view)
        await pilot.pause()
        assert "confidence" not in panel.query_one("#tokens-summary", Sketch).plain
        panel.confidence = True
        await pilot.pause()
        summary = panel.query_one("#tokens-summary", Sketch).plain
        assert all(label in summary for _, label in BANDS)
        assert confidence(record.probs).describe() in summary
        pieces = static_text(panel, "#tokens-pieces")
        styles = band_styles(panel)
        first = len(turn.view) - len(record.probs)
        at = sum(len(panel_piece(item.token.piece)) for item in turn.view[:first])
        for step in record.probs:
            shown = panel_piece(step.token)
            found = styles_over(pieces, at, at + len(shown))
            assert any(s.bgcolor == styles[band(step.p)].bgcolor for s in found), step
            at += len(shown)
        low = min(range(len(record.probs)), key=lambda i: record.probs[i].p)
        panel.focus()
        panel.select(first + low)
        await pilot.pause()
        assert panel.has_class("-alternatives")
        step = record.probs[low]
        text = panel.query_one("#tokens-alternatives", Sketch).plain
        assert f"(id {step.id})" in text and f"rank {step.rank}" in text and "after the sampler" in text
        assert f"entropy {step.entropy:.2f} bits" in text
        assert text.count("▶") == 1  # the chosen one, in the list or after it
        assert len(text.splitlines()) >= 2 + len(step.top)
        panel.select(0)  # a prompt token has no alternatives
        await pilot.pause()
        assert not panel.has_class("-alternatives")
        panel.confidence = False
        panel.select(first)
        await pilot.pause()
        assert not panel.has_class("-alternatives")


def panel_piece(piece: str) -> str:
    from chatapp.ui.widgets.paint import shown_piece

    return shown_piece(piece) or "∅"


async def test_a_reply_shows_its_tokens_shaded_in_the_view(turn, themes):
    record = turn.record
    reply = Reply(record.reply)
    reply.probs = record.probs
    async with Host(themes, reply).run_test(size=(100, 30)) as pilot:
        await pilot.pause()
        markdown = [strip.text for strip in reply._lines_for(reply.size.width)]
        reply.show_confidence(True)
        await pilot.pause()
        shaded = shaded_reply(reply, record.reply, record.probs)
        assert shaded is not None and shaded.plain == record.reply
        styles = band_styles(reply)
        at = 0
        for step in record.probs:
            assert any(s.bgcolor == styles[band(step.p)].bgcolor for s in styles_over(shaded, at, at + len(step.token)))
            at += len(step.token)
        lines = [strip.text for strip in reply._lines_for(reply.size.width)]
        assert "".join("".join(lines).split()) == "".join(record.reply.split())  # the text, wrapped
        reply.show_confidence(False)
        assert [strip.text for strip in reply._lines_for(reply.size.width)] == markdown
