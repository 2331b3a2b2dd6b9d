"""Tools in the TUI (issue 38): the palette's tool choice opens the config's MCP servers, a turn
runs the tool loop, each call waits on the approval dialog (approve once, always for this tool,
deny: the denial is the result the model reads), and calls and results are drawn as messages of
their own and kept in the session. The real default model, made to call `add` by the tool
choice, and the tests' MCP server (tests/data/mcp_test_server.py) over stdio."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from chatapp import paths
from chatapp.engine.chat.tool_turns import DENIED, MAX_STEPS
from chatapp.ui.app import ChatApp
from chatapp.ui.messages import ToolStep, TurnFinished
from chatapp.ui.screens.tool_approval import ToolApprovalScreen
from chatapp.ui.widgets.reply import Reply
from chatapp.ui.widgets.tool_messages import ToolResult
from chatapp.ui.widgets.transcript import Transcript, UserMessage
from tests.ui._helpers import (TURN_TIMEOUT, WIDE, Messages, notified, opened, store, turn_worker_done,
                              wait_until)

SERVER_SCRIPT = Path(__file__).parents[1] / "data" / "mcp_test_server.py"
MAX_APPROVALS = 4 * MAX_STEPS
"""More approvals than these tests' turns ask for (a few calls in each step): past it the loop is
taken to be endless and the test fails instead of waiting."""

pytestmark = pytest.mark.app_settings(max_tokens=40, opener=None, incognito=True)


def configure() -> None:
    """The tests' MCP server in the config, and only `add` and the clock offered (a small model
    that called `big` would fill its context with the result)."""
    path = paths.config_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text('[tools]\ndisabled = ["big", "environment", "read_file", "list_folder"]\n\n'
                    f'[mcp_servers.test]\ncommand = "{sys.executable}"\nargs = ["{SERVER_SCRIPT}"]\n')


async def tools_on(pilot, app: ChatApp, choice: str) -> None:
    await app.run_action(f"tool_choice({choice!r})")
    await wait_until(pilot, lambda: app.tools_ui.registry is not None, TURN_TIMEOUT)


async def ask(pilot, app: ChatApp, seen: Messages, text: str, first: str,
              then: str = "d") -> list[ToolApprovalScreen]:
    """Send `text`, answer the first approval with the key `first` and any later one with `then`,
    and wait for the whole tool loop; the approval dialogs answered, in order."""
    done = seen.count(TurnFinished)
    app.edit_text(text)
    await pilot.press("enter")
    await wait_until(pilot, lambda: app.generating or seen.count(TurnFinished) > done, TURN_TIMEOUT)
    asked: list[ToolApprovalScreen] = []
    for _ in range(MAX_APPROVALS + 1):
        await wait_until(pilot, lambda: isinstance(app.screen, ToolApprovalScreen) or not app.generating,
                         3 * TURN_TIMEOUT)  # up to four steps of the loop on a busy machine
        if not isinstance(app.screen, ToolApprovalScreen):
            break
        if len(asked) == MAX_APPROVALS:
            pytest.fail(f"the tool loop asked for approval more than {MAX_APPROVALS} times")
        asked.append(app.screen)
        await pilot.press(first if len(asked) == 1 else then)
        await pilot.pause()
    await turn_worker_done(pilot, app)
    return asked


def results(seen: Messages) -> list[ToolStep]:
    return [m for m in seen.of(ToolStep) if m.result is not None]


async def test_an_approved_call_runs_and_is_drawn_and_kept_with_its_result(make_app):
    configure()
    app, seen = make_app(session="tools")
    async with app.run_test(size=WIDE, message_hook=seen) as pilot:
        await opened(pilot, seen)
        await tools_on(pilot, app, "add")
        assert app.tools_ui.names() == ["current_time", "add"]
        asked = await ask(pilot, app, seen, "What is 17 plus 25?", "o")
        call = asked[0].call
        assert (call.name, asked[0].spec.server) == ("add", "test") and set(call.arguments) == {"a", "b"}
        assert asked[0].arguments == call.pretty_arguments()  # shown whole
        first = results(seen)[0]
        assert first.result == str(call.arguments["a"] + call.arguments["b"])
        assert first.note.startswith("add (test) · ") and first.note.endswith(" tok")

        path = [m for m in app.engine.tree.path()]
        assert [m.role for m in path[:4]] == ["user", "assistant", "tool", "assistant"]
        assert path[2].content == first.result
        drawn = app.query_one(Transcript).messages()
        assert [type(w) for w in drawn[:4]] == [UserMessage, Reply, ToolResult, Reply]
        assert [w.message_id for w in drawn] == [m.id for m in path]  # each with its id in the tree
        assert "calls a tool" in drawn[1].source and '"a":' in drawn[1].source  # not the raw JSON
        assert drawn[2].render().plain == first.result and drawn[2].border_title.startswith("tool · ")
        record = seen.of(TurnFinished)[0].record
        assert record.extra["tool_calls"][0]["approved"] is True

        # the result edited: selected, Alt+E, a new text, Enter; the model answers it beside the old one
        transcript = app.query_one(Transcript)
        transcript.select(drawn[2])
        assert "✎ edit result Alt+E" in drawn[2].border_subtitle
        await pilot.press("alt+e")
        assert app.query_one("Composer").text == first.result and app.branches_ui.pending is not None
        app.edit_text("1000")
        turns = seen.count(TurnFinished)
        await pilot.press("enter")
        await wait_until(pilot, lambda: seen.count(TurnFinished) > turns, TURN_TIMEOUT)
        await turn_worker_done(pilot, app)
        edited = [m for m in app.engine.tree.path()]
        assert [m.role for m in edited[:4]] == ["user", "assistant", "tool", "assistant"]
        assert edited[2].content == "1000" and edited[1].id == path[1].id and edited[3].id != path[3].id
        again = seen.of(TurnFinished)[-1].record
        assert again.extra["action"] == "edit" and again.extra["branch"] == "2/2"
        drawn = transcript.messages()
        assert drawn[2].render().plain == "1000" and "‹ 2/2 ›" in drawn[2].border_title
    saved = store().store.load("tools")
    kept = {m.id: m for m in saved.tree}
    assert [kept[m.id].role for m in path] == [m.role for m in path]
    assert kept[path[2].id].content == first.result and kept[edited[2].id].content == "1000"


async def test_a_denial_is_the_result_and_always_asks_no_more(make_app):
    configure()
    app, seen = make_app()
    async with app.run_test(size=WIDE, message_hook=seen) as pilot:
        await tools_on(pilot, app, "add")
        asked = await ask(pilot, app, seen, "What is 2 plus 3?", "d")
        assert asked and asked[0].call.name == "add"
        denied = results(seen)[0]
        assert denied.result == DENIED and denied.note == "add: denied"
        tool_messages = [m for m in app.engine.tree.path() if m.role == "tool"]
        assert tool_messages[0].content == DENIED  # what the model read

        asked = await ask(pilot, app, seen, "What is 4 plus 5?", "a")
        assert asked[0].call.name == "add" and list(app.tools_ui.always.values()) == [asked[0].spec]
        before = len(results(seen))
        asked = await ask(pilot, app, seen, "What is 6 plus 7?", "d")
        assert all(screen.call.name != "add" for screen in asked)  # add runs unasked now
        ran = results(seen)[before]
        assert ran.note.startswith("add (test) · ") and ran.result != DENIED

        # Listed in the palette with its server's command line, and taken back from there.
        from chatapp.ui.commands import ChatCommands

        hits = {title: action for title, _, action in ChatCommands(app.screen)._hits()}
        await hits["Tools: always allowed"]()  # run_action: a coroutine
        listed = await notified(pilot, seen, lambda n: n.title == "Tools approved always: 1")
        assert listed.message.startswith("add from test (") and SERVER_SCRIPT.name in listed.message
        revoke = next(action for title, action in hits.items() if title.startswith("Tools: ask again before add"))
        await revoke()
        await notified(pilot, seen, lambda n: n.message == "add from test asks before each call again")
        assert app.tools_ui.always == {}
        asked = await ask(pilot, app, seen, "What is 8 plus 9?", "d")
        assert asked and asked[0].call.name == "add"  # it asks again


async def test_a_loop_that_goes_no_further_says_why(make_app):
    configure()
    app, seen = make_app(max_tokens=6)  # too few for the whole call the tool choice asks for
    async with app.run_test(size=WIDE, message_hook=seen) as pilot:
        await tools_on(pilot, app, "add")
        assert await ask(pilot, app, seen, "What is 17 plus 25?", "o") == []  # nothing to approve
        said = await notified(pilot, seen, lambda n: n.title == "Tools" and n.severity == "warning")
        assert said.message == ("the call was cut at the reply's token limit (max_tokens) before it was whole; "
                                "it was not run")


async def test_tools_off_takes_the_schemas_out_of_the_prompt(make_app):
    configure()
    app, seen = make_app()
    async with app.run_test(size=WIDE, message_hook=seen) as pilot:
        await tools_on(pilot, app, "auto")
        await ask(pilot, app, seen, "Hi", "d")
        assert [t.name for t in app.engine.tools] == ["current_time", "add"]
        assert '"name": "add"' in app.engine.render()  # the generic format's tool list
        await app.run_action("tool_choice('none')")
        await ask(pilot, app, seen, "Hi", "d")
        assert not app.engine.tools and '"name": "add"' not in app.engine.render()


async def test_the_palette_offers_each_tool_as_a_choice_once_the_tools_are_open(make_app):
    from chatapp.ui.commands import ChatCommands

    configure()
    app, seen = make_app()
    async with app.run_test(size=WIDE, message_hook=seen) as pilot:
        titles = [title for title, _, _ in ChatCommands(app.screen)._hits()]
        assert {"Tools: off", "Tools: auto", "Tools: required"} <= set(titles)
        assert not [t for t in titles if t.startswith("Tools: call")]  # nothing started before it is wanted
        await tools_on(pilot, app, "required")
        titles = [title for title, _, _ in ChatCommands(app.screen)._hits()]
        assert [t for t in titles if t.startswith("Tools: call")] == ["Tools: call current_time", "Tools: call add"]
        await app.run_action("tool_choice('nothing_by_this_name')")
        await pilot.pause()
        assert app.tools_ui.choice == "auto"  # an unknown name is said in one line and falls back


async def test_the_configs_tool_choice_opens_the_tools_at_start(make_app):
    configure()
    path = paths.config_file()
    path.write_text(path.read_text().replace("[tools]\n", '[tools]\nchoice = "add"\n', 1))
    app, _seen = make_app()
    async with app.run_test(size=WIDE) as pilot:
        await wait_until(pilot, lambda: app.tools_ui.registry is not None, TURN_TIMEOUT)
        assert app.tools_ui.choice == "add" and "add" in app.tools_ui.names()


async def test_a_bad_tool_choice_in_the_config_is_one_line_and_the_tools_stay_off(make_app):
    path = paths.config_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text('[tools]\nchoice = "two words"\n')
    app, _seen = make_app()
    async with app.run_test(size=WIDE) as pilot:
        await pilot.pause()
        assert app.tools_ui.choice == "none" and app.tools_ui.registry is None
        assert any("choice must be" in n.message for n in app._notifications)


async def test_the_tool_choice_is_kept_with_the_session_and_comes_back_with_it(make_app):
    """A tool choice made in the palette holds once the tools are open (an unknown name falls back
    to auto first), the session keeps what holds, and opening it again offers the tools again."""
    configure()
    app, seen = make_app(session="tooled", incognito=False)
    async with app.run_test(size=WIDE, message_hook=seen) as pilot:
        await opened(pilot, seen)
        await tools_on(pilot, app, "nothing_by_this_name")
        await wait_until(pilot, lambda: store().store.choices("tooled").tools == "auto")
        await app.run_action("tool_choice('add')")
        await wait_until(pilot, lambda: store().store.choices("tooled").tools == "add")
    again, seen = make_app(session="tooled", incognito=False)
    async with again.run_test(size=WIDE, message_hook=seen) as pilot:
        await opened(pilot, seen)
        await wait_until(pilot, lambda: again.tools_ui.registry is not None, TURN_TIMEOUT)
        assert again.tools_ui.choice == "add"
