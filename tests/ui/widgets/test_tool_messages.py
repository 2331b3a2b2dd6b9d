"""Tool calls and results in the transcript (issue 38): a result is a message of its own drawn as
plain text (markup, Markdown and escapes shown, never obeyed), a call is drawn as its tool and
arguments verbatim in a code block no backticks inside can close, and both take their ids."""

from __future__ import annotations

from textual.app import App, ComposeResult

from chatapp.engine.events import Message
from chatapp.ui.shown import Shown
from chatapp.ui.widgets.reply import Reply
from chatapp.ui.widgets.tool_messages import ToolResult, call_markdown, fenced
from chatapp.ui.widgets.transcript import Transcript

HOSTILE = "[bold]not markup[/bold] **not bold** <b>x</b> \x1b[31mred ``` `````"
CALL = '{"tool_call": {"name": "write", "arguments": {"text": "```` [red]x[/red]"}}}'
SHOWN = HOSTILE.replace("\x1b", "\\x1b")
"""What a result draws: the markup as text, the escape as its backslash escape (never obeyed)."""


class Host(App):
    def compose(self) -> ComposeResult:
        yield Transcript(id="transcript")


def test_a_call_is_its_tool_and_arguments_in_a_fence_nothing_inside_closes():
    shown = call_markdown(CALL)
    assert shown is not None and shown.startswith("*calls a tool:*")
    body = shown.split("\n", 2)[2]
    assert body.startswith("`````\n") and body.endswith("\n`````")  # longer than the ```` inside
    assert '"text": "```` [red]x[/red]"' in body
    assert call_markdown("Just an answer.") is None
    assert fenced("a ``` b").startswith("````\n")


async def test_results_and_calls_are_messages_of_their_own_with_their_ids():
    app = Host()
    async with app.run_test(size=(100, 30)) as pilot:
        transcript = app.query_one(Transcript)
        path = [Shown(Message("user", "Write it.", id="u1")), Shown(Message("assistant", CALL, id="a1")),
                Shown(Message("tool", HOSTILE, id="t1")), Shown(Message("assistant", "Done.", id="a2"))]
        await transcript.show_path(path)
        await pilot.pause()
        drawn = transcript.messages()
        assert [w.message_id for w in drawn] == ["u1", "a1", "t1", "a2"]
        call, result = drawn[1], drawn[2]
        assert isinstance(call, Reply) and call.source == call_markdown(CALL)
        assert isinstance(result, ToolResult) and result.render().plain == SHOWN
        assert result.border_title == "tool · t1"
        transcript.select(result)
        assert transcript.selection().role == "tool" and result.border_subtitle == "✎ edit result Alt+E"

        await transcript.tool_step(HOSTILE, "write (notes) · 12 tok")  # while the loop runs: no id yet
        live = transcript.messages()[-1]
        assert isinstance(live, ToolResult) and live.render().plain == SHOWN
        assert live.border_title == "tool · write (notes) · 12 tok"
