"""Each tab of the panel deck is named as its panel is titled (issue 59: the tab said `Quant`, the panel `Model`)."""

from __future__ import annotations

from chatapp.ui.widgets.panel_deck import PANELS


async def test_every_tab_says_its_panel_s_title(app):
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.pause()
        for key, tab in PANELS:
            assert app.query_one(f"#{key}").border_title == tab
