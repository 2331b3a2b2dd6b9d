"""What a tool is, what a call asks for and what it gave back: plain data shared by the
registry, the prompt, the parser, the approval step and the session records."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from chatapp.format import shown_json

BUILTIN = "builtin"
"""The server name of chatapp's own tools."""
MAX_SCHEMA_BYTES = 64 * 1024
"""A tool schema past this is refused: a real one is a few hundred bytes, and each byte is
prompt every turn (a 1 MB schema would be most of any context window)."""
MAX_TOOLS_PER_SERVER = 128
"""Tools one MCP server may offer: every offered tool's schema is in every prompt, so a server
listing 10,000 (seen from a hostile one) would fill the context before the first question.
OpenAI's chat API takes at most 128 tools in a request; so does chatapp, per server."""
MAX_RESULT_CHARS = 32 * 1024
"""A tool result is cut to this many characters before the model reads it (and says so)."""


@dataclass(frozen=True)
class ToolSpec:
    """One tool as the model is told of it (OpenAI's function shape) and where it runs."""

    name: str
    description: str
    parameters: dict[str, Any]
    """The JSON schema of its arguments (an object schema)."""
    server: str = BUILTIN
    enabled: bool = True
    origin: str = ""
    """Where its server runs: the command line or the URL (McpServer.describe); "" for a built-in."""

    @property
    def approval_key(self) -> str:
        """What an "always" approval is given to: this tool of this server, run from this command
        or URL, described with this schema. A tool of the same name elsewhere, or one whose server
        changed its description or schema since, has another key and is asked for again."""
        served = json.dumps([self.server, self.origin, self.name, self.description, self.parameters],
                            sort_keys=True, default=str)
        return f"{self.server}.{self.name}#{hashlib.sha256(served.encode()).hexdigest()[:16]}"

    def as_openai(self) -> dict[str, Any]:
        """The `tools` entry a chat template reads: {"type": "function", "function": {...}}."""
        return {"type": "function",
                "function": {"name": self.name, "description": self.description, "parameters": self.parameters}}


@dataclass(frozen=True)
class ToolCall:
    """A call the model asked for: the tool's name and its arguments as parsed."""

    name: str
    arguments: dict[str, Any]
    id: str = ""

    def pretty_arguments(self) -> str:
        """The full arguments, pretty-printed, never cut: what the approval step shows. The same
        JSON value the tool is sent, with every control, bidi or zero-width character in it as a
        \\u escape, so an argument cannot hide a part of itself or read as another (shown_json)."""
        return shown_json(self.arguments)


@dataclass(frozen=True)
class ToolResult:
    """What a call gave back (or why it gave nothing): the text the model reads next."""

    text: str
    error: bool = False
    truncated: bool = False
    meta: dict[str, Any] = field(default_factory=dict)


def cap_result(text: str, limit: int = MAX_RESULT_CHARS) -> tuple[str, bool]:
    """`text` cut to `limit` characters with a note saying how much was left out."""
    if len(text) <= limit:
        return text, False
    return text[:limit] + f"\n[... {len(text) - limit:,} more characters left out]", True


def schema_problem(parameters: Any) -> str | None:
    """Why a tool's argument schema cannot be offered to the model, or None."""
    if not isinstance(parameters, dict):
        return "its input schema is not a JSON object"
    try:
        size = len(json.dumps(parameters))
    except (TypeError, ValueError):
        return "its input schema is not JSON"
    if size > MAX_SCHEMA_BYTES:
        return f"its input schema is {size:,} bytes (at most {MAX_SCHEMA_BYTES:,})"
    return None
