"""The tools' part of the config file: `[tools]` and one `[mcp_servers.NAME]` table per MCP
server, and the import of the `mcpServers` JSON that Claude Desktop, Cursor and LM Studio use.

    [tools]
    roots = ["~/notes"]          # read_file and list_folder look only under these
    disabled = ["list_folder"]   # tools never offered (a name, or SERVER.NAME)
    timeout = 30                 # seconds a server has to start, list or answer a call

    [mcp_servers.files]          # a server run as a child, spoken to over stdio
    command = "npx"
    args = ["-y", "@modelcontextprotocol/server-filesystem", "/tmp"]
    env = { LOG_LEVEL = "warn" } # the child's environment is these (plus PATH, HOME and the like), never chatapp's
    cwd = "/tmp"
    enabled = true

    [mcp_servers.web]            # a server already running, over streamable HTTP
    url = "http://127.0.0.1:8000/mcp"

Read with tomllib (chatapp.config.read_table), written with tomlkit so a user's comments stay.
"""

from __future__ import annotations

import json
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tomlkit
from tomlkit.exceptions import TOMLKitError

from chatapp import paths
from chatapp.config import read_table, read_text
from chatapp.errors import ConfigError

DEFAULT_TIMEOUT = 30.0
MAX_SERVERS = 64
SERVER_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
TOOL_CHOICE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")
"""none, auto, required, or what a tool's name may be (which tools there are, only opening tells)."""
_SERVER_KEYS = {"command", "args", "env", "cwd", "url", "headers", "enabled"}


@dataclass(frozen=True)
class McpServer:
    """One `[mcp_servers.NAME]` table: a command to run (stdio) or a URL (streamable HTTP)."""

    name: str
    command: str = ""
    args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    cwd: str = ""
    url: str = ""
    headers: dict[str, str] = field(default_factory=dict, repr=False)
    enabled: bool = True

    @property
    def transport(self) -> str:
        return "http" if self.url else "stdio"

    def describe(self) -> str:
        """Where it runs, in one line (no header values, no env values: they may be secrets)."""
        if self.url:
            return self.url
        return " ".join([self.command, *self.args])

    def to_table(self) -> dict[str, Any]:
        table: dict[str, Any] = {"url": self.url} if self.url else {"command": self.command}
        if self.args:
            table["args"] = list(self.args)
        for key in ("env", "headers"):
            if getattr(self, key):
                table[key] = dict(getattr(self, key))
        if self.cwd:
            table["cwd"] = self.cwd
        if not self.enabled:
            table["enabled"] = False
        return table


@dataclass(frozen=True)
class ToolSettings:
    roots: tuple[str, ...] = ()
    disabled: tuple[str, ...] = ()
    timeout: float = DEFAULT_TIMEOUT
    servers: tuple[McpServer, ...] = ()
    choice: str = "none"
    """The TUI's tool choice at start: "none", "auto", "required" or a tool's name (the palette
    changes it while the app runs; `ask` offers tools only when --tool or --tools asks)."""


def _strings(value: Any, where: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{where} must be a list of strings")
    return tuple(value)


def _string_table(value: Any, where: str) -> dict[str, str]:
    if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise ConfigError(f"{where} must be a table of strings")
    return dict(value)


def server_from(name: str, raw: Any, where: str) -> McpServer:
    """One server's table, checked; ConfigError in one line naming what is wrong."""
    if not SERVER_NAME.match(name):
        raise ConfigError(f"{where}: the server name {name!r} must be letters, digits, '_', '-' or '.'")
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}.{name} must be a table")
    unknown = sorted(set(raw) - _SERVER_KEYS)
    if unknown:
        raise ConfigError(f"{where}.{name}: unknown key {unknown[0]!r} (known: {', '.join(sorted(_SERVER_KEYS))})")
    command, url = raw.get("command", ""), raw.get("url", "")
    if not isinstance(command, str) or not isinstance(url, str):
        raise ConfigError(f"{where}.{name}: command and url must be strings")
    if bool(command) == bool(url):
        raise ConfigError(f"{where}.{name} needs either a command (stdio) or a url (streamable HTTP), not both")
    if url and not url.startswith(("http://", "https://")):
        raise ConfigError(f"{where}.{name}: url must start with http:// or https://")
    cwd, enabled = raw.get("cwd", ""), raw.get("enabled", True)
    if not isinstance(cwd, str):
        raise ConfigError(f"{where}.{name}: cwd must be a string")
    if not isinstance(enabled, bool):
        raise ConfigError(f"{where}.{name}: enabled must be true or false")
    return McpServer(name, command=command, args=_strings(raw.get("args", []), f"{where}.{name}.args"),
                     env=_string_table(raw.get("env", {}), f"{where}.{name}.env"), cwd=cwd, url=url,
                     headers=_string_table(raw.get("headers", {}), f"{where}.{name}.headers"), enabled=enabled)


def from_table(table: dict[str, Any], where: str = "config") -> ToolSettings:
    tools = table.get("tools", {})
    if not isinstance(tools, dict):
        raise ConfigError(f"{where}: [tools] must be a table")
    unknown = sorted(set(tools) - {"roots", "disabled", "timeout", "choice"})
    if unknown:
        raise ConfigError(f"{where}: unknown key {unknown[0]!r} in [tools] (known: choice, disabled, roots, timeout)")
    choice = tools.get("choice", "none")
    if not isinstance(choice, str) or not TOOL_CHOICE.fullmatch(choice):
        raise ConfigError(f"{where}: [tools] choice must be none, auto, required or a tool's name, "
                          f"not {str(choice)[:40]!r}")
    timeout = tools.get("timeout", DEFAULT_TIMEOUT)
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0.1 <= timeout <= 3600:
        raise ConfigError(f"{where}: [tools] timeout must be 0.1 to 3,600 seconds")
    servers = table.get("mcp_servers", {})
    if not isinstance(servers, dict):
        raise ConfigError(f"{where}: mcp_servers must hold one [mcp_servers.NAME] table per server")
    if len(servers) > MAX_SERVERS:
        raise ConfigError(f"{where}: {len(servers)} MCP servers; at most {MAX_SERVERS}")
    return ToolSettings(roots=_strings(tools.get("roots", []), f"{where}: [tools] roots"),
                        disabled=_strings(tools.get("disabled", []), f"{where}: [tools] disabled"),
                        timeout=float(timeout),
                        servers=tuple(server_from(n, raw, f"{where}: mcp_servers") for n, raw in servers.items()),
                        choice=choice)


def load_tool_settings(path: Path | None = None) -> ToolSettings:
    path = path or paths.config_file()
    table = read_table(path)
    return from_table(table or {}, str(path))


# --- the mcpServers JSON of other apps ----------------------------------------------------------
def parse_mcp_json(text: str, where: str = "the JSON") -> list[McpServer]:
    """The servers of a Claude Desktop / Cursor / LM Studio `mcpServers` JSON (the object itself,
    or a file holding it under "mcpServers"). `"disabled": true` imports as enabled = false;
    a "type" of sse is refused (chatapp speaks stdio and streamable HTTP)."""
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise ConfigError(f"{where} is not JSON: {' '.join(str(exc).split())[:200]}") from None
    if isinstance(data, dict) and "mcpServers" in data:
        data = data["mcpServers"]
    if not isinstance(data, dict):
        raise ConfigError(f"{where} has no \"mcpServers\" object")
    found = []
    for name, raw in data.items():
        if not isinstance(raw, dict):
            raise ConfigError(f"{where}: mcpServers.{name} is not an object")
        kind = raw.get("type", raw.get("transport", ""))
        if kind == "sse":
            raise ConfigError(f"{where}: mcpServers.{name} is an SSE server; chatapp speaks stdio and streamable HTTP")
        entry = {k: v for k, v in raw.items() if k in _SERVER_KEYS - {"enabled"} and v not in (None, "", [], {})}
        entry["enabled"] = not raw.get("disabled", False)
        found.append(server_from(name, entry, f"{where}: mcpServers"))
    return found


def add_servers(servers: list[McpServer], path: Path | None = None, *, replace: bool = False) -> Path:
    """Write `[mcp_servers.NAME]` tables into the config file, the rest of it left as it was
    (tomlkit edits the document). A name already there is refused unless `replace`."""
    from chatapp.private import atomic_write, make_private_dir

    path = path or paths.config_file()
    text = read_text(path) or ""
    try:
        document = tomlkit.parse(text)
    except TOMLKitError as exc:
        raise ConfigError(f"cannot read {path}: {exc}") from None
    table = document.get("mcp_servers")
    if table is None:
        table = tomlkit.table(is_super_table=True)
        document["mcp_servers"] = table
    for server in servers:
        if server.name in table and not replace:
            raise ConfigError(f"{path} already has [mcp_servers.{server.name}]; pass --replace to overwrite it")
        table[server.name] = server.to_table()
    edited = tomlkit.dumps(document)
    from_table(tomllib.loads(edited), str(path))  # what was written must read back as valid
    try:
        make_private_dir(path.parent)
        atomic_write(path, [edited.encode("utf-8")])  # 0600: an env or header may hold a key
    except OSError as exc:
        raise ConfigError(f"cannot write {path}: {exc.strerror or exc}") from None
    return path
