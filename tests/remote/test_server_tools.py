"""The tool loop over `--server` (issue 38): a real llama-server started with --jinja renders
the prompt with the tools (its /apply-template, with the model's template or chatapp's generic
tool list for one without tools), keeps a named tool choice's first reply to a well-formed call
(the call's JSON schema, which the server turns into a grammar; the tag a call is wrapped in is
forced), and the next step reuses the server's cache, prefilling only the result and the glue."""

from __future__ import annotations

from pathlib import Path

import pytest

from chatapp.engine.backend import GenerationSettings
from chatapp.engine.chat.tool_turns import ToolCallDone, ToolTurns
from chatapp.engine.events import TurnDone
from chatapp.engine.opening import connect_engine
from chatapp.engine.tools.calls import parse_calls
from chatapp.engine.tools.registry import ToolRegistry
from chatapp.engine.tools.servers import ToolSettings
from tests.engine.tools.conftest import stdio_server
from tests.gguf_copy import copies_with_templates

from .conftest import SETTINGS, start_llama_server


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


def asked_to_add(engine, registry) -> list:
    """The events of "What is 17 plus 25?" with the tool choice `add`, approved: two steps at most."""
    engine.generation = GenerationSettings(temperature=0.0, max_tokens=80)
    turns = ToolTurns(engine, registry, registry.choose(["add"]), lambda call, spec: "once", choice="add",
                      max_steps=2)
    return list(turns.run(lambda: engine.send("What is 17 plus 25?")))


def test_a_server_started_without_jinja_gets_the_tools_the_generic_way(another_server, registry):
    """--no-jinja: llama-server refuses `tools` in /apply-template; chatapp lists them in the system
    message itself, as for a template without tools, and the named choice's call still parses."""
    server = another_server("--no-jinja")
    engine = connect_engine(SETTINGS.replace(server=server.url))
    try:
        events = asked_to_add(engine, registry)
        assert engine.tool_format == "generic" and engine.tool_syntax == "generic"
        first = next(e.record for e in events if isinstance(e, TurnDone))
        (call,), _ = parse_calls(first.reply)
        assert call.name == "add" and set(call.arguments) == {"a", "b"}
        done = [e for e in events if isinstance(e, ToolCallDone)]
        assert done and done[0].result.text == str(call.arguments["a"] + call.arguments["b"])
        assert '"name": "add"' in engine.render()  # the generic list, in the system message
    finally:
        engine.close()


QWEN_TEMPLATE = Path(__file__).parent.parent / "data" / "templates" / "Qwen-Qwen2.5-7B-Instruct.jinja"
"""Qwen2.5's chat template as llama.cpp keeps it (models/templates): Hermes-style <tool_call> calls."""


@pytest.fixture(scope="module")
def hermes_model(default_model_path, tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("hermes") / "smollm2-qwen-template.gguf"
    copies_with_templates(default_model_path, {path: QWEN_TEMPLATE.read_text()})
    return path


def test_a_named_call_in_tool_call_tags_is_kept_to_its_schema_over_llama_server(hermes_model, tmp_path, registry):
    """A template whose calls are wrapped in <tool_call> tags: the opening tag is forced, the
    server keeps the JSON to the call's schema, and the closing tag ends the reply (without
    them this model answers in words)."""
    server = start_llama_server(hermes_model, tmp_path / "server")
    engine = connect_engine(SETTINGS.replace(server=server.url))
    try:
        events = asked_to_add(engine, registry)
        assert engine.tool_syntax == "hermes"
        first, second = [e.record for e in events if isinstance(e, TurnDone)]
        assert first.reply.startswith("<tool_call>\n{") and first.reply.endswith("}\n</tool_call>")
        (call,), _ = parse_calls(first.reply)
        assert call.name == "add" and set(call.arguments) == {"a", "b"}
        assert all(isinstance(v, int) for v in call.arguments.values())
        done = next(e for e in events if isinstance(e, ToolCallDone))
        assert done.result.text == str(call.arguments["a"] + call.arguments["b"])
        assert "<tool_response>" in engine.render() and second.cached_tokens > first.prompt_tokens
    finally:
        engine.close()
        server.stop()
