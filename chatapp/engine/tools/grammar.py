"""A grammar that makes the reply a well-formed call: the call's JSON (the tool's name, and
arguments valid for its schema) inside the syntax the model's format expects. The local backend
turns it into GBNF with llama.cpp's own converter (chatapp.engine.local.llama.call_gbnf), so even
a 135M model emits a call that parses and whose arguments fit.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from chatapp.engine.tools.spec import ToolSpec

SYNTAXES = ("hermes", "mistral", "llama3", "generic")


@dataclass(frozen=True)
class CallGrammar:
    """The reply as `prefix` + a JSON value of `schema` + `suffix`; or, where `gbnf` is given,
    as that GBNF text says (a reply shape from `ask --grammar`, chatapp.engine.shape)."""

    schema: dict[str, Any] = field(default_factory=dict)
    prefix: str = ""
    suffix: str = ""
    gbnf: str = ""


def _call_schema(tool: ToolSpec, arguments_key: str) -> dict[str, Any]:
    return {"type": "object", "properties": {"name": {"const": tool.name}, arguments_key: tool.parameters},
            "required": ["name", arguments_key]}


def call_grammar(tools: Sequence[ToolSpec], syntax: str) -> CallGrammar:
    """The grammar of one call to any of `tools` (one tool: a call to it) in `syntax`."""
    key = "parameters" if syntax == "llama3" else "arguments"
    calls = [_call_schema(t, key) for t in tools]
    one = calls[0] if len(calls) == 1 else {"anyOf": calls}
    if syntax == "hermes":
        return CallGrammar(one, "<tool_call>\n", "\n</tool_call>")
    if syntax == "mistral":
        return CallGrammar({"type": "array", "items": one, "minItems": 1, "maxItems": 1}, "[TOOL_CALLS]")
    if syntax == "llama3":
        return CallGrammar(one)
    return CallGrammar({"type": "object", "properties": {"tool_call": one}, "required": ["tool_call"]})
