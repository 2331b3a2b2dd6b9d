"""The tools in the prompt for a template that has none of its own, after llama.cpp's generic
chat format: the tool list goes in the system message, with how to answer with a call.

A template that reads `tools` (Qwen's, Hermes', Llama 3.x's, Mistral's...) renders them
itself; chatapp.engine.chat.tool_prompt asks it first and falls back to this.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from chatapp.engine.tools.spec import ToolSpec

PROBE_TOOL = ToolSpec("chatapp_probe_tool_7f3a", "chatapp's probe: does the template render tools?",
                      {"type": "object", "properties": {}})
"""Rendered once per model: a template that prints its name reads `tools`."""


def generic_block(tools: Sequence[ToolSpec]) -> str:
    """What the system message gains for a template without tools of its own."""
    listed = "\n".join(json.dumps(t.as_openai()["function"], ensure_ascii=False) for t in tools)
    return ("You can call these tools, one JSON schema a line:\n" + listed + "\n\n"
            "To call a tool, answer with only this JSON and nothing else:\n"
            '{"tool_call": {"name": "<tool name>", "arguments": {<its arguments>}}}\n'
            "Otherwise answer the user directly. A tool's result comes back as a message from the tool.")


def with_generic_block(system: str, tools: Sequence[ToolSpec]) -> str:
    return (system.rstrip() + "\n\n" if system.strip() else "") + generic_block(tools)
