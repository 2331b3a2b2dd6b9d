"""Tool calls read out of a reply: the families' own formats (chatapp.engine.tools.call_formats,
one table after llama.cpp's chat parsers), then two that need no marker:

- Llama 3.x: a reply that is one JSON object `{"name": ..., "parameters": {...}}`
  (after `<|python_tag|>` or not);
- chatapp's generic format (a template without tools): `{"tool_call": {"name", "arguments"}}`,
  or `{"tool_calls": [...]}`.

Anything else is a plain reply. A call whose JSON is broken is not a call: the reply stands as
text (a grammar keeps calls well formed where it is on: chatapp.engine.tools.grammar).
"""

from __future__ import annotations

from collections.abc import Sequence

from chatapp.engine.tools.call_formats import call_of, family_calls, first_json
from chatapp.engine.tools.spec import ToolCall, ToolSpec


def parse_calls(reply: str, tools: Sequence[ToolSpec] = ()) -> tuple[list[ToolCall], str]:
    """The calls in a reply, and its text outside them ("" when it is only calls). `tools`: those
    offered, whose schemas type the arguments a family writes as text (Qwen3.5's `<parameter=...>`)."""
    types = {t.name: {k: v.get("type") for k, v in t.parameters.get("properties", {}).items()
                      if isinstance(v, dict) and isinstance(v.get("type"), str)} for t in tools}
    if (found := family_calls(reply, types)) is not None:
        return found
    body = reply.split("<|python_tag|>", 1)[-1].strip()
    if body.startswith("{"):
        value = first_json(body)
        if isinstance(value, dict):
            if "tool_call" in value:
                call = call_of(value["tool_call"])
                return ([call], "") if call else ([], reply)
            if isinstance(value.get("tool_calls"), list):
                calls = [c for c in (call_of(v) for v in value["tool_calls"]) if c]
                return (calls, "") if calls else ([], reply)
            if isinstance(value.get("response"), str):  # the generic format's plain answer
                return [], value["response"]
            call = call_of(value)
            if call is not None:
                return [call], ""
    return [], reply
