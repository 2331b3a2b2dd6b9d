"""The confidence view: reply tokens shaded by probability, a reply token's alternatives, the
reply's confidence line; on the real model's turns, and in the app through its key."""

from __future__ import annotations

import pytest
from rich.console import Console

from chatapp.config import Settings
from chatapp.engine.opening import open_engine
from chatapp.engine.sampling import BANDS, band, confidence
from chatapp.ui.screens.help import HelpScreen
from chatapp.ui.widgets.confidence import VIEW_CANDIDATES, band_styles, shaded_reply
from chatapp.ui.widgets.paint import Sketch
from chatapp.ui.widgets.reply import Reply
from chatapp.ui.widgets.tokens_panel import TokensPanel
from chatapp.ui.widgets.transcript import Transcript
from tests.ui._helpers import shown_after, wait_until
from chatapp.ui.messages import TurnStarted
from tests.ui._helpers import NARROW, finished, send_text
from tests.ui.widgets.test_panels import Host, run_turn, static_text, styles_over, themes  # noqa: F401 - a fixture

pytestmark = pytest.mark.app_settings(threads=0)

SETTINGS = Settings(n_ctx=1024, temperature=1.0, seed=21, max_tokens=24)


@pytest.fixture(scope="module")
def turn(default_model_path):
    engine = open_engine(SETTINGS, str(default_model_path))
    engine.set_generation(logprobs=VIEW_CANDIDATES)
    found = run_turn(engine, "Invent a name for a cat.")
    yield found
    engine.close()


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


async def test_f10_turns_the_view_and_the_engine_s_probabilities_on_and_off(make_app):
    app, seen = make_app(max_tokens=8)
    async with app.run_test(size=NARROW, message_hook=seen) as pilot:
        assert app.engine.generation.logprobs == 0
        await send_text(pilot, app, seen, "Hi")
        assert not app.query_one(Transcript).replies()[-1].probs  # nothing computed with the view off
        await pilot.press("f10")  # from the composer, which has the focus
        assert app.engine.generation.logprobs == VIEW_CANDIDATES and app.query_one(TokensPanel).confidence
        await send_text(pilot, app, seen, "Hello again")
        reply = app.query_one(Transcript).replies()[-1]
        await wait_until(pilot, lambda: reply.confidence and reply.probs)
        assert app.query_one(TokensPanel).probs == reply.probs
        await pilot.press("f10")
        assert app.engine.generation.logprobs == 0 and not reply.confidence
        await pilot.press("f1")
        assert isinstance(app.screen, HelpScreen)
        console = Console(width=200, record=True)
        console.print(app.screen.table)
        listed = console.export_text()
        assert "F10" in listed and "Confidence view" in listed


async def test_a_number_key_on_a_reply_token_branches_the_reply_with_that_candidate(make_app):
    app, seen = make_app(max_tokens=12)
    async with app.run_test(size=NARROW, message_hook=seen) as pilot:
        await pilot.press("f10")
        first = (await send_text(pilot, app, seen, "Name a fruit.")).record
        question, old_reply = [m.id for m in app.engine.messages if m.id]
        old_ids = app.engine.last_reply_ids()
        panel = app.query_one(TokensPanel)
        assert panel.probs == first.probs and len(first.probs) == len(old_ids) >= 3
        at = 2
        panel.focus()
        panel.select(len(panel.shown_tokens) - len(first.probs) + at)
        await pilot.pause()
        step = panel.selected_probs
        assert step is first.probs[at]
        text = panel.query_one("#tokens-alternatives", Sketch).plain
        assert "1–9: a new reply from here with that token" in text
        await pilot.press("2")
        again = (await finished(pilot, app, seen, 2)).record
        chosen = step.top[1].id
        assert app.engine.last_reply_ids()[:at + 1] == [*old_ids[:at], chosen]
        tree = app.engine.tree
        assert [m.id for m in tree.children(question)] == [old_reply, again.extra["message_id"]]
        assert tree[old_reply].content == first.reply  # kept, word for word
        assert again.extra["branch"] == "2/2" and seen.of(TurnStarted)[-1].regenerate
        assert again.prefill_tokens <= 1  # the reply's cache was kept: only the chosen token is new
        line = f"kept {again.cached_tokens:,} tokens up to the token chosen; prefilled {again.prefill_tokens:,}"
        assert app.query_one(TokensPanel).note.startswith(line)
        # A number past the candidates, or with no reply token selected, does nothing.
        panel.focus()
        panel.select(0)
        await pilot.press("3")
        await pilot.pause()
        assert not app.generating and len(tree.children(question)) == 2
        # Back on the first reply (its widget mounted anew), it is shaded as when it was written.
        await pilot.press("alt+left")
        transcript = app.query_one(Transcript)
        await wait_until(pilot, lambda: transcript.replies() and transcript.replies()[-1].message_id == old_reply)
        back = transcript.replies()[-1]
        assert back.probs == first.probs and back.confidence
        assert shaded_reply(back, back.source, back.probs) is not None
