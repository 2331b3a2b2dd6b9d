"""`ask` with tools: which are offered (--tool NAME, --tools), --tool-choice, and which calls
may run (--allow-tool NAME, --allow-tools). A call nobody allowed is refused, said on stderr,
and the model reads the refusal as the tool's result."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from rich.console import Console
from rich.markup import escape

from chatapp.errors import InputError
from chatapp.format import text_start

if TYPE_CHECKING:
    from chatapp.engine.chat.engine import Engine
    from chatapp.engine.chat.tool_turns import ToolCallDone, ToolTurns
    from chatapp.engine.tools.registry import ToolRegistry


@dataclass(frozen=True)
class ToolOptions:
    offer: tuple[str, ...] = ()
    offer_all: bool = False
    choice: str = "auto"
    allow: tuple[str, ...] = ()
    allow_all: bool = False
    source: str = "--tool-choice"
    """Where `choice` came from, as a refusal names it: the option, or a preset's `tools`."""

    @property
    def wanted(self) -> bool:
        return bool(self.offer or self.offer_all)

    def check(self) -> None:
        if not self.wanted and (self.allow or self.allow_all or self.choice != "auto"):
            raise InputError("--allow-tool, --allow-tools and --tool-choice go with --tool NAME or --tools")


def open_registry(only: list[str] | None = None) -> ToolRegistry:
    """The built-ins and every enabled MCP server's tools, as the config file sets them up."""
    from chatapp import paths
    from chatapp.engine.tools.registry import ToolRegistry
    from chatapp.engine.tools.servers import load_tool_settings

    return ToolRegistry.open(load_tool_settings(), log_dir=paths.cache_dir() / "mcp-logs", only=only)


def open_tools(options: ToolOptions, err: Console) -> tuple[ToolRegistry, list]:
    """The registry (MCP servers started) and the tools offered, before the model loads: a tool
    choice or --allow-tool naming no offered tool is one line then, naming where it came from
    (`options.source`: the option, or the preset whose `tools` it is)."""
    from chatapp.engine.chat.tool_turns import CHOICES

    registry = open_registry()
    try:
        for notice in registry.notices:
            err.print(f"[yellow]tools: {escape(notice)}[/]")
        offered = registry.enabled() if options.offer_all else registry.choose(options.offer)
        names = {t.name for t in offered}
        unknown = [name for name in options.allow if name not in names]
        if unknown:
            raise InputError(f"--allow-tool {unknown[0]}: that tool is not offered (--tool {unknown[0]})")
        if options.choice not in CHOICES and options.choice not in names:
            raise InputError(f"{options.source} must be auto, none, required or an offered tool's name "
                             f"({', '.join(sorted(names)) or 'none offered'}), got {options.choice!r}")
        return registry, offered
    except BaseException:
        registry.close()
        raise


def tool_turns_for(engine: Engine, registry: ToolRegistry, offered: list, options: ToolOptions, err: Console,
                   end_reply_line: Callable[[], None]) -> ToolTurns:
    """The conversation's tool turns, for `ask`; `end_reply_line` ends the reply's line on
    stdout before a refusal is said on stderr."""
    from chatapp.engine.chat.tool_turns import ToolTurns

    def approve(call, spec):
        if options.allow_all or call.name in options.allow:
            return "once"
        end_reply_line()
        err.print(f"[yellow]refused a call of {escape(call.name)} ({escape(spec.server)}): not allowed; "
                  f"--allow-tool {escape(call.name)} lets it run. Its arguments:[/]")
        err.print(escape(call.pretty_arguments()), markup=True)
        return "deny"

    return ToolTurns(engine, registry, offered, approve, choice=options.choice)


def call_line(done: ToolCallDone) -> str:
    """One line on stderr for a call that ran: the tool, its result's size, the start of the result."""
    if not done.approved:
        return f"tool {done.call.name}: {done.why}"
    head = text_start(done.result.text, 80)
    error = " (error)" if done.result.error else ""
    return f"tool {done.call.name} ({done.server}) -> {done.result_tokens} tok{error}: {head}"
