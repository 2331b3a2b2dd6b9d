"""One MCP server, spoken to from plain threads through the `mcp` SDK (which is asyncio).

Every connection lives on one event loop in a daemon thread (`_Loop`): a task per server
enters the SDK's `Client` (stdio: the server runs as a child; or streamable HTTP), lists the
tools and waits until the connection is closed, and each call is a coroutine sent to that
loop with a deadline. So a server that never answers costs the caller `timeout` seconds and
one line, a crash or a broken reply is one line too, and `close` ends the child (the SDK
closes its stdin, then sends SIGTERM, then SIGKILL).

A stdio child's environment is the SDK's short safe list (HOME, LOGNAME, PATH, SHELL, TERM,
USER) plus the `env` its config names: never chatapp's own environment, its API key included.
Its stderr goes to a log file in chatapp's cache folder, never to the terminal or the TUI.

The SDK is imported here, lazily: it takes about a second, and only a configured server needs it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

from chatapp.engine.tools.servers import McpServer
from chatapp.engine.tools.spec import MAX_TOOLS_PER_SERVER, ToolResult, ToolSpec, cap_result, schema_problem
from chatapp.errors import ToolError


def _one_line(exc: BaseException) -> str:
    if isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        return _one_line(exc.exceptions[0])
    text = " ".join(str(exc).split())[:300]
    return text or type(exc).__name__


def _quiet_sdk_logging() -> None:
    """The SDK logs a server's bad lines with tracebacks; Python would print them on stderr,
    over the TUI. What matters comes back as a call's one-line result instead."""
    import logging

    logger = logging.getLogger("mcp")
    if not any(isinstance(h, logging.NullHandler) for h in logger.handlers):
        logger.addHandler(logging.NullHandler())
    logger.propagate = False


class _Loop:
    """The event loop all MCP connections share, in a daemon thread started on first use."""

    _lock = threading.Lock()
    _loop: asyncio.AbstractEventLoop | None = None

    @classmethod
    def get(cls) -> asyncio.AbstractEventLoop:
        with cls._lock:
            if cls._loop is None or cls._loop.is_closed():
                _quiet_sdk_logging()
                loop = asyncio.new_event_loop()
                threading.Thread(target=loop.run_forever, name="chatapp-mcp", daemon=True).start()
                cls._loop = loop
            return cls._loop


class McpConnection:
    """A connected MCP server: its tools, `call`, `close`. `start` connects (or raises ToolError)."""

    def __init__(self, server: McpServer, timeout: float, log_dir: Path | None = None) -> None:
        self.server = server
        self.timeout = timeout
        self.log_dir = log_dir
        self.tools: list[ToolSpec] = []
        self.skipped: list[str] = []
        """Tools the server offered that were left out, one line each (a schema too big...)."""
        self._client: Any = None
        self._closing: asyncio.Event | None = None
        self._task: concurrent.futures.Future | None = None
        self._loop = _Loop.get()

    # --- on the loop ---------------------------------------------------------------------------
    def _transport(self, stack: AsyncExitStack) -> Any:
        if self.server.url:
            from mcp.client.streamable_http import streamable_http_client

            if not self.server.headers:
                return streamable_http_client(self.server.url)
            from mcp.shared._httpx_utils import create_mcp_http_client  # the SDK's client, with headers

            return streamable_http_client(self.server.url, http_client=create_mcp_http_client(self.server.headers))
        from mcp.client.stdio import StdioServerParameters, stdio_client

        errlog = open(self._log_path(), "a", encoding="utf-8")  # closed by the stack
        stack.callback(errlog.close)
        params = StdioServerParameters(command=self.server.command, args=list(self.server.args),
                                       env=dict(self.server.env) or None, cwd=self.server.cwd or None)
        return stdio_client(params, errlog=errlog)

    def _log_path(self) -> str:
        import os

        if self.log_dir is None:
            return os.devnull
        self.log_dir.mkdir(parents=True, exist_ok=True)
        return str(self.log_dir / f"{self.server.name}.log")

    async def _hold(self, ready: concurrent.futures.Future) -> None:
        from mcp import Client

        self._closing = asyncio.Event()
        try:
            async with AsyncExitStack() as stack:
                client = await stack.enter_async_context(
                    Client(self._transport(stack), read_timeout_seconds=self.timeout, mode="legacy"))
                listed = await client.list_tools()
                self._client = client
                ready.set_result(listed.tools)
                await self._closing.wait()
        except BaseException as exc:  # whatever the server or the SDK raised: one line
            if not ready.done():
                ready.set_exception(exc)
            if isinstance(exc, asyncio.CancelledError):
                raise
        finally:
            self._client = None

    # --- from any thread -----------------------------------------------------------------------
    def start(self) -> list[ToolSpec]:
        ready: concurrent.futures.Future = concurrent.futures.Future()
        self._task = asyncio.run_coroutine_threadsafe(self._hold(ready), self._loop)
        try:
            listed = ready.result(timeout=self.timeout)
        except concurrent.futures.TimeoutError:
            self.close()
            raise ToolError(f"MCP server {self.server.name} did not answer within {self.timeout:g} s") from None
        except Exception as exc:  # noqa: BLE001 - a crash, a refusal, a broken reply
            self.close()
            raise ToolError(f"MCP server {self.server.name} could not start: {_one_line(exc)}") from None
        self.tools = []
        for tool in listed:
            problem = schema_problem(tool.input_schema)
            if problem:
                self.skipped.append(f"{self.server.name}: tool {tool.name!r} left out: {problem}")
                continue
            self.tools.append(ToolSpec(tool.name, (tool.description or "")[:2000], dict(tool.input_schema),
                                       self.server.name, origin=self.server.describe()))
        if len(self.tools) > MAX_TOOLS_PER_SERVER:
            self.skipped.append(f"{self.server.name}: lists {len(self.tools):,} tools; the first "
                                f"{MAX_TOOLS_PER_SERVER} are offered (each one's schema is in every prompt)")
            del self.tools[MAX_TOOLS_PER_SERVER:]
        return self.tools

    def call(self, name: str, arguments: dict[str, Any]) -> ToolResult:
        """The call's result as text; a failure is a result too (error=True), never an exception."""
        client = self._client
        if client is None:
            return ToolResult(f"MCP server {self.server.name} is not connected", error=True)
        future = asyncio.run_coroutine_threadsafe(
            client.call_tool(name, arguments, read_timeout_seconds=self.timeout), self._loop)
        try:
            result = future.result(timeout=self.timeout + 1)
        except concurrent.futures.TimeoutError:
            future.cancel()
            return ToolResult(f"MCP server {self.server.name} did not answer {name} within {self.timeout:g} s",
                              error=True)
        except Exception as exc:  # noqa: BLE001 - an MCPError, a dead child, a reply that is not JSON-RPC
            return ToolResult(f"MCP server {self.server.name} failed on {name}: {_one_line(exc)}", error=True)
        return result_text(result)

    def close(self) -> None:
        """End the connection (and a stdio child) and wait for it, at most a few seconds."""
        closing, task = self._closing, self._task
        if closing is not None:
            self._loop.call_soon_threadsafe(closing.set)
        if task is not None:
            try:
                task.result(timeout=8)
            except Exception:  # noqa: BLE001 - it is going away either way
                task.cancel()
        self._task = None


def result_text(result: Any) -> ToolResult:
    """A CallToolResult as the text the model reads: each text block, other blocks named."""
    parts = []
    for block in getattr(result, "content", []) or []:
        kind = getattr(block, "type", "")
        if kind == "text":
            parts.append(block.text)
        elif kind == "resource" and hasattr(getattr(block, "resource", None), "text"):
            parts.append(block.resource.text)
        else:
            parts.append(f"[{kind or 'unknown'} content left out]")
    if not parts and getattr(result, "structured_content", None) is not None:
        import json

        parts.append(json.dumps(result.structured_content, ensure_ascii=False))
    text, truncated = cap_result("\n".join(parts))
    return ToolResult(text, error=bool(getattr(result, "is_error", False)), truncated=truncated)
