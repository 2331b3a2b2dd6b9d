"""Every tool the model may be offered, one name each: chatapp's built-ins, then each enabled
MCP server's. Built once from the config (`ToolRegistry.open`), closed once (its servers'
children end with it).

A server that cannot start, or a tool whose schema is refused, is a one-line notice and the
rest go on. Two servers offering the same name: the later one's is offered as SERVER_NAME.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from chatapp.engine.tools.builtin import Roots, builtin_tools
from chatapp.engine.tools.servers import ToolSettings
from chatapp.engine.tools.spec import ToolCall, ToolResult, ToolSpec
from chatapp.errors import InputError, ToolError


@dataclass(frozen=True)
class _Entry:
    spec: ToolSpec
    run: Callable[[dict[str, Any]], ToolResult]
    served_as: str
    """The name its server knows it by (differs from spec.name when renamed)."""


def _start(connection) -> list[ToolSpec] | ToolError:
    try:
        return connection.start()
    except ToolError as exc:
        return exc


class ToolRegistry:
    def __init__(self, settings: ToolSettings | None = None) -> None:
        self.settings = settings or ToolSettings()
        self.notices: list[str] = []
        self._entries: dict[str, _Entry] = {}
        self._connections: list[Any] = []
        disabled = set(self.settings.disabled)
        for name, (spec, run) in builtin_tools(Roots.of(self.settings.roots)).items():
            self._add(replace(spec, enabled=not ({name, f"{spec.server}.{name}"} & disabled)), run, name)

    @classmethod
    def open(cls, settings: ToolSettings, *, log_dir: Path | None = None,
             only: Iterable[str] | None = None) -> "ToolRegistry":
        """The built-ins and every enabled server's tools (or the servers named in `only`)."""
        registry = cls(settings)
        wanted = set(only) if only is not None else None
        servers = [s for s in settings.servers if s.enabled and (wanted is None or s.name in wanted)]
        if not servers:
            return registry
        from concurrent.futures import ThreadPoolExecutor

        from chatapp.engine.tools.mcp_client import McpConnection

        connections = [McpConnection(server, settings.timeout, log_dir) for server in servers]
        with ThreadPoolExecutor(max_workers=min(8, len(connections)), thread_name_prefix="chatapp-mcp-start") as pool:
            started = list(pool.map(_start, connections))  # at once: a silent server costs one timeout, not one each
        for connection, outcome in zip(connections, started):
            if isinstance(outcome, ToolError):
                registry.notices.append(outcome.message)
            else:
                registry._adopt(connection, outcome)
        return registry

    def _adopt(self, connection, specs: list[ToolSpec]) -> None:
        server = connection.server
        self._connections.append(connection)
        self.notices.extend(connection.skipped)
        disabled = set(self.settings.disabled)
        for spec in specs:
            def run(args: dict[str, Any], _name: str = spec.name) -> ToolResult:
                return connection.call(_name, args)

            off = {spec.name, f"{server.name}.{spec.name}"} & disabled
            self._add(replace(spec, enabled=not off), run, spec.name)

    def _add(self, spec: ToolSpec, run: Callable[[dict[str, Any]], ToolResult], served_as: str) -> None:
        if spec.name in self._entries:
            spec = replace(spec, name=f"{spec.server}_{spec.name}")
            if spec.name in self._entries:
                self.notices.append(f"{spec.server}: tool {served_as!r} left out: its name is taken twice")
                return
        self._entries[spec.name] = _Entry(spec, run, served_as)

    # --- what there is -------------------------------------------------------------------------
    def all(self) -> list[ToolSpec]:
        """Every tool, enabled or not, in the order found."""
        return [entry.spec for entry in self._entries.values()]

    def enabled(self) -> list[ToolSpec]:
        return [spec for spec in self.all() if spec.enabled]

    def get(self, name: str) -> ToolSpec:
        entry = self._entries.get(name)
        if entry is None:
            known = ", ".join(self._entries) or "none"
            raise InputError(f"no tool named {name!r} (the tools: {known})")
        return entry.spec

    def choose(self, names: Iterable[str]) -> list[ToolSpec]:
        """The tools named (each must exist; a disabled one is offered when named)."""
        return [replace(self.get(name), enabled=True) for name in names]

    # --- calls ---------------------------------------------------------------------------------
    def call(self, call: ToolCall) -> ToolResult:
        """Run a call; a tool that does not exist or fails is a result that says so (error=True)."""
        entry = self._entries.get(call.name)
        if entry is None:
            return ToolResult(f"there is no tool named {call.name!r}", error=True)
        try:
            return entry.run(call.arguments)
        except Exception as exc:  # noqa: BLE001 - a tool's failure is the model's to read, in one line
            return ToolResult(f"{call.name} failed: {' '.join(str(exc).split())[:300]}", error=True)

    def close(self) -> None:
        """End every server connection (and their children)."""
        connections, self._connections = self._connections, []
        for connection in connections:
            connection.close()

    def __enter__(self) -> "ToolRegistry":
        return self

    def __exit__(self, *_exc) -> None:
        self.close()
