"""Tool calls read out of a reply, for the common families (after llama.cpp's chat parsers):

- Hermes / Qwen: `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`, one or more;
- Mistral: `[TOOL_CALLS] [{"name": ..., "arguments": {...}}, ...]`;
- Llama 3.x: a reply that is one JSON object `{"name": ..., "parameters": {...}}`
  (after `<|python_tag|>` or not);
- chatapp's generic format (a template without tools): `{"tool_call": {"name", "arguments"}}`,
  or `{"tool_calls": [...]}`.

Anything else is a plain reply. A call whose JSON is broken is not a call: the reply stands as
text (a grammar keeps calls well formed where it is on: chatapp.engine.tools.grammar).
"""

from __future__ import annotations

import json
import re
from typing import Any

from chatapp.engine.tools.spec import ToolCall

_HERMES = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|$)", re.S)
_DECODER = json.JSONDecoder()


def _object(text: str) -> Any:
    """The JSON value at the start of `text` (after blanks), or None."""
    text = text.strip()
    try:
        value, _end = _DECODER.raw_decode(text)
    except (ValueError, RecursionError):
        return None
    return value


def _call(value: Any) -> ToolCall | None:
    if not isinstance(value, dict) or not isinstance(value.get("name"), str):
        return None
    arguments = value.get("arguments", value.get("parameters", {}))
    if isinstance(arguments, str):  # OpenAI's shape: the arguments as a JSON string
        arguments = _object(arguments)
    if not isinstance(arguments, dict):
        return None
    return ToolCall(value["name"], arguments, str(value.get("id", "")))


def parse_calls(reply: str) -> tuple[list[ToolCall], str]:
    """The calls in a reply, and its text outside them ("" when it is only calls)."""
    if "<tool_call>" in reply:
        calls = [c for c in (_call(_object(m.group(1))) for m in _HERMES.finditer(reply)) if c]
        if calls:
            return calls, reply[:reply.index("<tool_call>")].strip()
    if "[TOOL_CALLS]" in reply:
        head, _, rest = reply.partition("[TOOL_CALLS]")
        value = _object(rest)
        calls = [c for c in (_call(v) for v in (value if isinstance(value, list) else [value])) if c]
        if calls:
            return calls, head.strip()
    body = reply.split("<|python_tag|>", 1)[-1].strip()
    if body.startswith("{"):
        value = _object(body)
        if isinstance(value, dict):
            if "tool_call" in value:
                call = _call(value["tool_call"])
                return ([call], "") if call else ([], reply)
            if isinstance(value.get("tool_calls"), list):
                calls = [c for c in (_call(v) for v in value["tool_calls"]) if c]
                return (calls, "") if calls else ([], reply)
            if isinstance(value.get("response"), str):  # the generic format's plain answer
                return [], value["response"]
            call = _call(value)
            if call is not None:
                return [call], ""
    return [], reply
