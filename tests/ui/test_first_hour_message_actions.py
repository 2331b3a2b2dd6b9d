"""Edit, regenerate and branch are reachable by mouse, as llama.cpp's WebUI puts them under a
message: the selected message lists its actions on a row under it, each with its key, and a
click on one does what the key does."""

from __future__ import annotations

from textual.geometry import Region

from chatapp.ui.messages import TurnFinished
from chatapp.ui.widgets.composer import Composer
from chatapp.ui.widgets.transcript import Reply, Transcript, UserMessage
from tests.ui._helpers import next_of, send, wait_until

WIDE = (160, 48)


def last_row(widget) -> str:
    return widget.render_lines(Region(0, widget.outer_size.height - 1, widget.outer_size.width, 1))[0].text


async def click_action(pilot, widget, label: str) -> None:
    row = last_row(widget)
    assert label in row, f"{label!r} not under the selected message: {row!r}"
    await pilot.click(widget, offset=(row.index(label) + 1, widget.outer_size.height - 1))
    await pilot.pause()


async def test_a_click_on_the_selected_message_s_actions_regenerates_edits_and_branches(make_app):
    app, seen = make_app()
    async with app.run_test(size=WIDE, message_hook=seen) as pilot:
        await send(pilot, "Name a colour.", seen)
        transcript = app.query_one(Transcript)
        reply = transcript.query(Reply).last()
        assert "regenerate" not in last_row(reply)  # only the selected message shows them
        await pilot.click(reply, offset=(3, 1))
        assert app.selection().message_id == reply.message_id
        assert all(label in last_row(reply) for label in ("↻ regenerate ^R", "⑂ branch here Alt+C", "▒ tokens Alt+P"))

        await click_action(pilot, reply, "↻ regenerate")
        done = await next_of(pilot, seen, TurnFinished, 1, "turn")
        assert done.record.extra["action"] == "regenerate" and done.record.extra["branch"] == "2/2"

        question = transcript.query(UserMessage).last()
        await pilot.click(question, offset=(3, 1))
        assert app.selection().role == "user" and "✎ edit Alt+E" in last_row(question)
        await click_action(pilot, question, "✎ edit")
        assert app.query_one(Composer).text == "Name a colour."
        assert app.branches_ui.pending.action == "edit" and app.branches_ui.pending.target == question.message_id
        await pilot.press("escape")  # the edit cancelled
        await wait_until(pilot, lambda: app.branches_ui.pending is None)

        reply = transcript.query(Reply).last()
        await pilot.click(reply, offset=(3, 1))
        await click_action(pilot, reply, "⑂ branch here")
        assert app.branches_ui.pending.action == "branch" and app.branches_ui.pending.target == reply.message_id
        assert app.focused is app.query_one(Composer)  # the next question is typed there
