"""Drafting in the app, on the real default model: the Speed and Tokens panels while a drafted
reply streams and after it, and the palette action that turns drafting on and off (the panels
alone: tests/ui/widgets/test_drafting_panels.py).

The engine's backend verifies every draft it has (`AlwaysDraft`), so that a short reply has
accepted drafts whatever this machine's step costs say.
"""

from __future__ import annotations

from chatapp.engine.stats import draft_figures
from chatapp.ui.app import ChatApp
from chatapp.ui.commands import COMMANDS
from chatapp.ui.messages import ReplyProgress, TurnFinished
from chatapp.ui.widgets.paint import Sketch
from chatapp.ui.widgets.speed_panel import SpeedPanel
from chatapp.ui.widgets.tokens_panel import TokensPanel
from tests.engine.local.speculative import PROMPTS
from tests.ui._helpers import Messages, notified, wait_until
from tests.ui.drafting import SETTINGS, drafting_engine


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
            said = f"drafting on: prompt lookup, up to {SETTINGS.draft_max} tokens a step"
            await notified(pilot, seen, lambda n: n.message == said)
    finally:
        app.release_engine()
