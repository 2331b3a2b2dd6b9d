"""Calls read out of replies, family by family; anything else stays a reply."""

import pytest

from chatapp.engine.chat.thoughts import TurnSplit
from chatapp.engine.thinking import ThinkingFormat
from chatapp.engine.tools.calls import parse_calls
from chatapp.engine.tools.grammar import call_grammar
from chatapp.engine.tools.spec import ToolCall, ToolSpec

ADD = ToolCall("add", {"a": 1, "b": 2})
BROKEN = '<tool_call>{"name": "add", "arguments": {"a": 1,</tool_call>'


@pytest.mark.parametrize("reply, calls, text", [
    ('<tool_call>\n{"name": "add", "arguments": {"a": 1, "b": 2}}\n</tool_call>', [ADD], ""),
    ('Let me add.\n<tool_call>{"name": "add", "arguments": {"a": 1, "b": 2}}</tool_call>\n'
     '<tool_call>{"name": "now", "arguments": {}}</tool_call>', [ADD, ToolCall("now", {})], "Let me add."),
    ('[TOOL_CALLS] [{"name": "add", "arguments": {"a": 1, "b": 2}}]', [ADD], ""),
    ('{"name": "add", "parameters": {"a": 1, "b": 2}}', [ADD], ""),
    ('<|python_tag|>{"name": "add", "parameters": {"a": 1, "b": 2}}', [ADD], ""),
    ('{"tool_call": {"name": "add", "arguments": {"a": 1, "b": 2}}}', [ADD], ""),
    ('{"tool_calls": [{"name": "add", "arguments": "{\\"a\\": 1, \\"b\\": 2}"}]}', [ADD], ""),
    ('{"response": "It is 3."}', [], "It is 3."),
    ("Just an answer.", [], "Just an answer."),
    (BROKEN, [], BROKEN),
    ('{"a": 1}', [], '{"a": 1}'),
])
def test_each_family_parses(reply, calls, text):
    assert parse_calls(reply) == (calls, text)


def test_a_calls_grammar_wraps_the_tools_schema_in_the_syntax():
    tool = ToolSpec("add", "", {"type": "object", "properties": {"a": {"type": "integer"}}}, "t")
    hermes = call_grammar([tool], "hermes")
    assert (hermes.prefix, hermes.suffix) == ("<tool_call>\n", "\n</tool_call>")
    assert hermes.schema["properties"]["name"] == {"const": "add"}
    assert call_grammar([tool], "llama3").schema["required"] == ["name", "parameters"]
    generic = call_grammar([tool, tool], "generic")
    assert len(generic.schema["properties"]["tool_call"]["anyOf"]) == 2


@pytest.mark.parametrize("fmt", [ThinkingFormat("think-tags", "<think>", "</think>"),
                                 ThinkingFormat("think-tags", "<think>", "</think>", prompt_opening="<think>\n")],
                         ids=["model-opened", "prompt-opened"])
def test_a_call_written_inside_a_thought_is_no_call(fmt):
    """A turn splits its reply with TurnSplit.parts before anything else reads it, and the tool
    loop reads calls from the record's reply, which is the answer alone: a call the model only
    thought of (here, reading a private key) is never asked for, let alone run."""
    thought = ('I could call <tool_call>{"name": "read_file", "arguments": {"path": "~/.ssh/id_ed25519"}}'
               '</tool_call> but I will not.')
    reply = (thought if fmt.prompt_opening else f"<think>{thought}") + "</think>The answer is 4."
    answer, thinking = TurnSplit(fmt).parts(reply)
    assert parse_calls(reply)[0] and "read_file" in thinking  # the whole text would hold one
    assert answer == "The answer is 4." and parse_calls(answer)[0] == []
