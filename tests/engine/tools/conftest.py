import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from chatapp.engine.tools.servers import McpServer

SERVER_SCRIPT = Path(__file__).parents[2] / "data" / "mcp_test_server.py"


def stdio_server(name: str = "test", **changes) -> McpServer:
    """The tests' MCP server (tests/data/mcp_test_server.py), run as a child over stdio."""
    return McpServer(name, command=sys.executable, args=(str(SERVER_SCRIPT),), **changes)


def script_server(tmp_path: Path, name: str, source: str) -> McpServer:
    """A hostile 'server': a Python script that does whatever `source` says on stdio."""
    script = tmp_path / f"{name}.py"
    script.write_text(source)
    return McpServer(name, command=sys.executable, args=(str(script),))


@pytest.fixture
def http_server():
    """The tests' MCP server over streamable HTTP on 127.0.0.1; yields its URL."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    child = subprocess.Popen([sys.executable, str(SERVER_SCRIPT), "http", str(port)],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                if child.poll() is not None:
                    pytest.fail(f"the MCP test server exited ({child.returncode}) before listening on port {port}")
                if time.monotonic() > deadline:
                    pytest.fail(f"the MCP test server did not listen on 127.0.0.1:{port} within 30 s")
                time.sleep(0.1)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        child.terminate()
        child.wait(timeout=10)
