"""A small MCP server for the tests, written with the `mcp` SDK (MCPServer, FastMCP's 2.x name).

    python mcp_test_server.py                 # over stdio
    python mcp_test_server.py http PORT       # streamable HTTP on 127.0.0.1:PORT/mcp
"""

import os
import sys

from mcp.server.mcpserver import MCPServer

server = MCPServer("chatapp-test")


@server.tool()
def add(a: int, b: int) -> int:
    """Add two integers."""
    if log := os.environ.get("CALL_LOG"):  # where tests count the calls that really ran
        with open(log, "a") as calls:
            calls.write(f"add {a} {b}\n")
    return a + b


@server.tool()
def environment(name: str) -> str:
    """The value of an environment variable in this server, or (unset)."""
    return os.environ.get(name, "(unset)")


@server.tool()
def big(n: int) -> str:
    """A result of n characters."""
    return "x" * n


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "http":
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        server.run("stdio")
