"""‹ n/m › in a message's title is clickable, as in llama.cpp's WebUI and Open WebUI: a click on ›
shows the next sibling's branch, a click on ‹ the previous one; a click elsewhere selects."""

from __future__ import annotations

from chatapp.ui.messages import BranchChanged, TurnFinished
from chatapp.ui.widgets.transcript import Reply, Transcript, arrow_at
from tests.ui._helpers import next_of, send

WIDE = (160, 48)


def arrow_column(widget, arrow: str) -> int:
    from textual.geometry import Region

    return widget.render_lines(Region(0, 0, widget.outer_size.width, 1))[0].text.rfind(arrow)


async def test_clicking_the_arrows_of_a_reply_switches_its_branch(make_app):
    app, seen = make_app()
    async with app.run_test(size=WIDE, message_hook=seen) as pilot:
        await send(pilot, "Name a colour.", seen)
        first = app.engine.leaf
        await pilot.press("ctrl+r")
        await next_of(pilot, seen, TurnFinished, 1, "turn")
        second = app.engine.leaf
        reply = app.query_one(Transcript).query(Reply).last()
        assert (reply.position, reply.siblings) == (2, 2)
        left, right = arrow_column(reply, "‹"), arrow_column(reply, "›")
        assert 0 < left < right and arrow_at(reply, left) == -1 and arrow_at(reply, right) == 1
        assert arrow_at(reply, 0) == 0  # the rest of the title selects, as before

        await pilot.click(reply, offset=(left, 0))
        await next_of(pilot, seen, BranchChanged, 0, "branch")
        assert app.engine.leaf == first and app.selection().index == 1  # as Alt+Left leaves it
        reply = app.query_one(Transcript).query(Reply).last()
        await pilot.click(reply, offset=(arrow_column(reply, "›"), 0))
        await next_of(pilot, seen, BranchChanged, 1, "branch")
        assert app.engine.leaf == second
