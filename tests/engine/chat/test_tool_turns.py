"""The tool loop on the real default model: a grammar makes the small model's first reply a
well-formed call, the call is approved (or not), its result goes back as a "tool" message, and
the next step reuses the whole cache, prefilling only the result and the template's glue."""

import json

import pytest

from chatapp.engine.backend import GenerationSettings
from chatapp.engine.chat.tool_turns import DENIED, ToolCallDone, ToolTurns
from chatapp.engine.events import TurnDone
from chatapp.engine.tools.calls import parse_calls
from chatapp.engine.tools.registry import ToolRegistry
from chatapp.engine.tools.servers import ToolSettings
from chatapp.errors import InputError
from tests.engine.conftest import make_engine
from tests.engine.tools.conftest import stdio_server


@pytest.fixture(scope="module")
def registry():
    with ToolRegistry.open(ToolSettings(servers=(stdio_server(),), timeout=30)) as opened:
        yield opened


@pytest.fixture
def engine(runtime):
    chat = make_engine(runtime, "You are a helpful assistant.")
    chat.generation = GenerationSettings(temperature=0.0, max_tokens=60)
    return chat


def run(turns, engine, question):
    events = list(turns.run(lambda: engine.send(question)))
    return [e.record for e in events if isinstance(e, TurnDone)], [e for e in events if isinstance(e, ToolCallDone)]


def test_a_named_tool_choice_makes_the_small_model_call_it_well_formed(engine, registry):
    asked = []
    turns = ToolTurns(engine, registry, registry.choose(["add"]),
                      lambda call, spec: asked.append((call, spec.server)) or "once", choice="add", max_steps=2)
    records, calls = run(turns, engine, "What is 17 plus 25?")
    first = records[0]
    (call,), _ = parse_calls(first.reply)
    assert call.name == "add" and set(call.arguments) == {"a", "b"}
    assert all(isinstance(v, int) for v in call.arguments.values())
    assert asked == [(call, "test")]
    done = calls[0]
    assert done.approved and done.result.text == str(call.arguments["a"] + call.arguments["b"])
    assert first.extra["tool_calls"] == [{"name": "add", "server": "test", "arguments": call.arguments,
                                          "approved": True, "result": done.result.text,
                                          "result_tokens": done.result_tokens, "error": False}]
    # the next step: the cache held the first step's prompt and reply, and all of it is reused
    second = records[1]
    assert second.extra["action"] == "tool"
    assert second.cached_tokens == first.kv_used
    assert second.prefill_tokens == second.prompt_tokens - first.kv_used < 30
    roles = [m.role for m in engine.messages]
    assert roles[:5] == ["system", "user", "assistant", "tool", "assistant"]
    assert engine.messages[3].content == done.result.text


def test_a_denied_call_goes_back_to_the_model_as_its_result(engine, registry):
    turns = ToolTurns(engine, registry, registry.choose(["add"]), lambda call, spec: "deny", choice="required",
                      max_steps=1)
    records, calls = run(turns, engine, "Add 2 and 3.")
    assert [c.approved for c in calls] == [False] and calls[0].why == "denied"
    assert records[0].extra["tool_calls"][0]["approved"] is False
    assert records[0].extra["tool_calls"][0]["result"] == DENIED


def test_a_denied_result_edited_is_answered_beside_the_denial_from_the_cache(engine, registry):
    """Edit a call's result: a sibling of the tool message, and the model's reply to it; the
    cache held everything up to the call, so only the new result and the glue are prefilled."""
    turns = ToolTurns(engine, registry, registry.choose(["add"]), lambda call, spec: "deny", choice="required",
                      max_steps=2)
    records, _ = run(turns, engine, "Add 2 and 3.")
    denial = next(m for m in engine.messages if m.role == "tool")
    assert denial.content == DENIED
    record = next(e.record for e in engine.edit(denial.id, "5") if isinstance(e, TurnDone))
    now = [m for m in engine.messages if m.role == "tool"]
    assert [m.content for m in now] == ["5"] and engine.messages[-1].role == "assistant"
    family, index = engine.tree.siblings(now[0].id)
    assert family == [denial.id, now[0].id] and index == 1
    assert record.extra["action"] == "edit" and record.extra["branch"] == "2/2"
    assert record.cached_tokens >= records[0].kv_used  # the question and the call, from the cache
    assert record.prefill_tokens == record.prompt_tokens - record.cached_tokens < 30
    with pytest.raises(InputError, match="only a question or a tool's result"):
        engine.edit(engine.messages[-1].id, "no")


def test_always_asks_once_per_tool(engine, registry):
    asked = []
    turns = ToolTurns(engine, registry, registry.choose(["add"]), lambda call, spec: asked.append(call) or "always",
                      choice="add", max_steps=1)
    run(turns, engine, "What is 1 plus 1?")
    turns.choice = "add"
    run(turns, engine, "And 2 plus 2?")
    (spec,) = registry.choose(["add"])
    assert len(asked) == 1 and turns.always == {spec.approval_key: spec}


@pytest.mark.parametrize("elsewhere", [{"origin": "npx other-server"}, {"server": "other"},
                                       {"parameters": {"type": "object", "properties": {"path": {"type": "string"}}}},
                                       {"description": "Adds two numbers. Also reads ~/.ssh for context."}])
def test_always_is_not_carried_to_another_server_or_a_changed_schema(engine, registry, elsewhere):
    """"Always" is given to one tool of one server as it was described: the same name from another
    command line or server, or with a changed schema or description, asks again."""
    from dataclasses import replace

    (spec,) = registry.choose(["add"])
    assert spec.origin.endswith(str(stdio_server().args[-1]))  # the command line it runs from
    always = {spec.approval_key: spec}
    asked = []
    changed = replace(spec, **elsewhere)
    turns = ToolTurns(engine, registry, [changed], lambda call, s: asked.append(s) or "deny", choice="add",
                      max_steps=1, always=always)
    run(turns, engine, "What is 1 plus 1?")
    assert asked == [changed] and changed.approval_key != spec.approval_key


def test_tool_choice_none_offers_nothing_and_a_bad_choice_is_one_line(engine, registry):
    ToolTurns(engine, registry, registry.choose(["add"]), lambda c, s: "deny", choice="none")
    assert engine.tools == () and "You can call" not in engine.render()
    with pytest.raises(InputError, match="--tool-choice"):
        ToolTurns(engine, registry, registry.choose(["add"]), lambda c, s: "deny", choice="subtract")


def test_the_tools_are_in_the_prompt_the_model_reads(engine, registry):
    ToolTurns(engine, registry, registry.choose(["add", "big"]), lambda c, s: "deny")
    text = engine.render()
    assert json.dumps(registry.get("add").as_openai()["function"]) in text


def test_a_call_cut_by_max_tokens_is_not_run_and_says_why(engine, registry):
    """A named choice's grammar makes the reply a call; with too few tokens for the whole call it
    ended unparsed, and the loop stopped without a word on why."""
    engine.set_generation(max_tokens=6)
    turns = ToolTurns(engine, registry, registry.choose(["add"]), lambda call, spec: "once", choice="add")
    records, calls = run(turns, engine, "What is 17 plus 25?")
    assert [r.finish_reason for r in records] == ["length"] and calls == []
    assert records[0].extra["tool_loop_end"] == ("the call was cut at the reply's token limit (max_tokens) "
                                                 "before it was whole; it was not run")
