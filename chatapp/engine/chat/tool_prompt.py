"""The conversation rendered with tools: through the model's own template when it reads
`tools` (found by rendering a probe tool once: llama.cpp's chat parser detects formats the same
way, from what the template renders), otherwise with the tool list in the system message
(chatapp.engine.tools.prompting, llama.cpp's generic format).

And what each tool costs: its schema's tokens, counted exactly as the next prompt would hold
them (the prompt rendered and tokenized with and without the tool, the difference).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Protocol

from chatapp.engine.events import Message
from chatapp.engine.tools.prompting import PROBE_TOOL, with_generic_block
from chatapp.engine.tools.spec import ToolSpec


class ToolRender(Protocol):
    def __call__(self, messages: Sequence[Message], *, add_generation_prompt: bool,
                 tools: Sequence[dict] | None = None, switches: Mapping[str, bool] | None = None) -> str: ...


class ToolPrompt:
    """One model's way of putting tools in its prompt."""

    def __init__(self, render: ToolRender) -> None:
        self._render = render
        self._probe: str | None = None

    def _probed(self) -> str:
        if self._probe is None:
            self._probe = self._render([Message("user", "hi")], add_generation_prompt=True,
                                       tools=[PROBE_TOOL.as_openai()])
        return self._probe

    @property
    def native(self) -> bool:
        """Whether the model's own template renders `tools` (asked once)."""
        return PROBE_TOOL.name in self._probed()

    @property
    def syntax(self) -> str:
        """How the model writes a call (chatapp.engine.tools.calls): what its template tells it,
        read from the probe render; chatapp's generic JSON for a template without tools."""
        text = self._probed()
        if PROBE_TOOL.name not in text:
            return "generic"
        return "hermes" if "<tool_call>" in text else "mistral" if "[AVAILABLE_TOOLS]" in text else "llama3"

    @property
    def format(self) -> str:
        return "template" if self.native else "generic"

    def render(self, messages: Sequence[Message], *, add_generation_prompt: bool,
               tools: Sequence[ToolSpec] = (), switches: Mapping[str, bool] | None = None) -> str:
        """`switches`: the template's flags (the thinking switch), as Backend.render takes them."""
        if not tools:
            return self._render(messages, add_generation_prompt=add_generation_prompt, switches=switches)
        if self.native:
            return self._render(messages, add_generation_prompt=add_generation_prompt,
                                tools=[t.as_openai() for t in tools], switches=switches)
        return self._render(generic_messages(messages, tools), add_generation_prompt=add_generation_prompt,
                            switches=switches)


def generic_messages(messages: Sequence[Message], tools: Sequence[ToolSpec]) -> list[Message]:
    """The messages with the tool list in the system message (one is added when there is none)."""
    messages = list(messages)
    if messages and messages[0].role == "system":
        return [replace(messages[0], content=with_generic_block(messages[0].content, tools)), *messages[1:]]
    return [Message("system", with_generic_block("", tools)), *messages]


@dataclass(frozen=True)
class ToolCosts:
    """The prompt tokens tools add: each tool's own (the prompt with every tool, less the prompt
    with every tool but that one), and the glue the template adds once for any tools at all."""

    per_tool: dict[str, int]
    glue: int
    total: int
    format: str

    def to_json(self) -> dict:
        return {"per_tool": dict(self.per_tool), "glue": self.glue, "total": self.total, "format": self.format}


def tool_costs(count: Callable[[Sequence[ToolSpec]], int], tools: Sequence[ToolSpec], format: str) -> ToolCosts:
    """`count(tools)`: the prompt's tokens with those tools offered."""
    tools = list(tools)
    base = count([])
    full = count(tools) if tools else base
    per_tool = {t.name: full - count([o for o in tools if o.name != t.name]) for t in tools}
    return ToolCosts(per_tool, full - base - sum(per_tool.values()), full - base, format)
