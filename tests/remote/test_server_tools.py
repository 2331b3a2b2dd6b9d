"""The tool loop over `--server` (issue 38): a real llama-server started with --jinja renders
the prompt with the tools (its /apply-template, with the model's template or chatapp's generic
tool list for one without tools), keeps a named tool choice's first reply to a well-formed call
(the call's JSON schema, which the server turns into a grammar), and the next step reuses the
server's cache, prefilling only the result and the template's glue."""

from __future__ import annotations

import pytest

from chatapp.engine.backend import GenerationSettings
from chatapp.engine.chat.tool_turns import ToolCallDone, ToolTurns
from chatapp.engine.events import TurnDone
from chatapp.engine.opening import connect_engine
from chatapp.engine.tools.calls import parse_calls
from chatapp.engine.tools.registry import ToolRegistry
from chatapp.engine.tools.servers import ToolSettings
from tests.engine.tools.conftest import stdio_server

from .conftest import SETTINGS


@pytest.fixture(scope="module")
def registry():
    with ToolRegistry.open(ToolSettings(servers=(stdio_server(),), timeout=30)) as opened:
        yield opened


def test_a_named_tool_choice_calls_the_tool_through_llama_server(another_server, registry):
    server = another_server("--jinja")
    engine = connect_engine(SETTINGS.replace(server=server.url))
    engine.generation = GenerationSettings(temperature=0.0, max_tokens=80)
    try:
        asked = []
        turns = ToolTurns(engine, registry, registry.choose(["add", "big"]),
                          lambda call, spec: asked.append(call.name) or "once", choice="add", max_steps=2)
        events = list(turns.run(lambda: engine.send("What is 17 plus 25?")))
        records = [e.record for e in events if isinstance(e, TurnDone)]
        done = [e for e in events if isinstance(e, ToolCallDone)]
        first = records[0]
        (call,), _ = parse_calls(first.reply)  # the grammar held: one call, well formed
        assert call.name == "add" and set(call.arguments) == {"a", "b"}
        assert all(isinstance(v, int) for v in call.arguments.values())
        assert asked[0] == "add" and done[0].server == "test"
        assert done[0].result.text == str(call.arguments["a"] + call.arguments["b"])
        assert '"name": "add"' in engine.render()  # the schemas are in the server-rendered prompt
        second = records[1]
        assert second.extra["action"] == "tool"
        assert second.cached_tokens == first.kv_used  # the server's cache held the whole first step
        assert second.prefill_tokens == second.prompt_tokens - first.kv_used < 30
        assert [m.role for m in engine.messages][:5] == ["system", "user", "assistant", "tool", "assistant"]
    finally:
        engine.close()


def test_a_server_started_without_jinja_gets_the_tools_the_generic_way(another_server, registry):
    """--no-jinja: llama-server refuses `tools` in /apply-template; chatapp lists them in the system
    message itself, as for a template without tools, and the named choice's call still parses."""
    server = another_server("--no-jinja")
    engine = connect_engine(SETTINGS.replace(server=server.url))
    engine.generation = GenerationSettings(temperature=0.0, max_tokens=80)
    try:
        turns = ToolTurns(engine, registry, registry.choose(["add"]), lambda call, spec: "once", choice="add",
                          max_steps=2)
        events = list(turns.run(lambda: engine.send("What is 17 plus 25?")))
        assert engine.tool_format == "generic" and engine.tool_syntax == "generic"
        first = next(e.record for e in events if isinstance(e, TurnDone))
        (call,), _ = parse_calls(first.reply)
        assert call.name == "add" and set(call.arguments) == {"a", "b"}
        done = [e for e in events if isinstance(e, ToolCallDone)]
        assert done and done[0].result.text == str(call.arguments["a"] + call.arguments["b"])
        assert '"name": "add"' in engine.render()  # the generic list, in the system message
    finally:
        engine.close()
