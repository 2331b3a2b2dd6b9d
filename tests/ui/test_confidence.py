"""The confidence view in the app, through its key (F10) and a candidate's number key, on the real
model (the widgets that draw it: tests/ui/widgets/test_confidence.py)."""

from __future__ import annotations

import pytest
from rich.console import Console

from chatapp.ui.screens.help import HelpScreen
from chatapp.ui.shown import VIEW_CANDIDATES
from chatapp.ui.widgets.confidence import shaded_reply
from chatapp.ui.widgets.paint import Sketch
from chatapp.ui.widgets.tokens_panel import TokensPanel
from chatapp.ui.widgets.transcript import Transcript
from chatapp.ui.messages import TurnStarted
from tests.ui._helpers import NARROW, finished, send_text, wait_until

pytestmark = pytest.mark.app_settings(threads=0)


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
        assert "1–9 or a click: a new reply from here with that token" in text
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
