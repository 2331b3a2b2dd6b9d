"""A real MCP server written with the SDK, over stdio and streamable HTTP, and hostile ones:
each failure is one line and the rest goes on."""

import os
import time

from chatapp.engine.tools.registry import ToolRegistry
from chatapp.engine.tools.servers import McpServer, ToolSettings
from chatapp.engine.tools.spec import MAX_RESULT_CHARS, MAX_TOOLS_PER_SERVER, ToolCall
from tests.engine.tools.conftest import script_server, stdio_server


def test_a_stdio_server_lists_and_answers(monkeypatch):
    monkeypatch.setenv("CHATAPP_API_KEY", "sk-never-seen")
    server = stdio_server(env={"GIVEN": "yes"})
    with ToolRegistry.open(ToolSettings(servers=(server,), timeout=30)) as registry:
        assert registry.notices == []
        assert [(t.name, t.server) for t in registry.all()][1:] == [("add", "test"), ("environment", "test"),
                                                                     ("big", "test")]
        add = registry.get("add")
        assert add.parameters["required"] == ["a", "b"] and add.description == "Add two integers."
        assert registry.call(ToolCall("add", {"a": 2, "b": 40})).text == "42"
        # the child sees the env its config names, never chatapp's API key
        assert registry.call(ToolCall("environment", {"name": "GIVEN"})).text == "yes"
        assert registry.call(ToolCall("environment", {"name": "CHATAPP_API_KEY"})).text == "(unset)"
        bad = registry.call(ToolCall("add", {"a": "x"}))
        assert bad.error
        missing = registry.call(ToolCall("subtract", {}))
        assert missing.error and "no tool named 'subtract'" in missing.text
        big = registry.call(ToolCall("big", {"n": 5_000_000}))
        assert big.truncated and len(big.text) < MAX_RESULT_CHARS + 100


def test_closing_ends_the_child(tmp_path):
    pid_file = tmp_path / "pid"
    server = script_server(tmp_path, "pid", f"""
import os, runpy, sys
open({str(pid_file)!r}, "w").write(str(os.getpid()))
sys.argv = ["server"]
runpy.run_path({str(stdio_server().args[0])!r}, run_name="__main__")
""")
    registry = ToolRegistry.open(ToolSettings(servers=(server,), timeout=30))
    assert registry.notices == []
    pid = int(pid_file.read_text())
    registry.close()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.05)
    else:
        raise AssertionError("the MCP server's child outlived the registry")


def test_a_streamable_http_server(http_server):
    server = McpServer("web", url=http_server)
    with ToolRegistry.open(ToolSettings(servers=(server,), timeout=30)) as registry:
        assert registry.notices == []
        assert registry.get("add").server == "web"
        assert registry.call(ToolCall("add", {"a": 1, "b": 2})).text == "3"


def test_hostile_servers_are_one_line_each_and_the_rest_goes_on(tmp_path):
    silent = script_server(tmp_path, "silent", "import time\ntime.sleep(60)\n")
    garbage = script_server(tmp_path, "garbage", "import sys, time\nfor line in sys.stdin:\n"
                                                 "    print('this is not JSON-RPC', flush=True)\n")
    crashing = script_server(tmp_path, "crash", "raise SystemExit(3)\n")
    missing = McpServer("missing", command=str(tmp_path / "no-such-program"))
    started = time.monotonic()
    with ToolRegistry.open(ToolSettings(servers=(silent, garbage, crashing, missing, stdio_server()),
                                        timeout=8)) as registry:
        assert time.monotonic() - started < 30
        assert len(registry.notices) == 4, registry.notices
        assert all("\n" not in n and n.startswith("MCP server ") for n in registry.notices)
        assert "silent did not answer within 8 s" in registry.notices[0]
        assert registry.call(ToolCall("add", {"a": 1, "b": 1})).text == "2"  # the good one still works


def test_a_huge_schema_is_left_out(tmp_path):
    huge = script_server(tmp_path, "huge", """
from mcp.server.mcpserver import MCPServer
server = MCPServer("huge")
@server.tool(description="x" * 10)
def small() -> str:
    return "ok"
from mcp.server.mcpserver.tools import Tool
props = {f"p{i}": {"type": "string", "description": "d" * 100} for i in range(1000)}
server._tool_manager._tools["wide"] = Tool.from_function(lambda: "never", name="wide")
server._tool_manager._tools["wide"].parameters = {"type": "object", "properties": props}
server.run("stdio")
""")
    with ToolRegistry.open(ToolSettings(servers=(huge,), timeout=30)) as registry:
        assert [t.name for t in registry.all()] == ["current_time", "small"]
        assert any("'wide' left out" in n and "input schema is" in n for n in registry.notices), registry.notices


def test_a_server_listing_thousands_of_tools_offers_the_first_128_and_says_so(tmp_path):
    many = script_server(tmp_path, "many", """
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.tools import Tool
server = MCPServer("many")
for i in range(2000):
    server._tool_manager._tools[f"t{i}"] = Tool.from_function(lambda: "n", name=f"t{i}")
server.run("stdio")
""")
    with ToolRegistry.open(ToolSettings(servers=(many,), timeout=30)) as registry:
        offered = [t.name for t in registry.all() if t.server == "many"]
        assert offered == [f"t{i}" for i in range(MAX_TOOLS_PER_SERVER)]
        assert registry.notices == [f"many: lists 2,000 tools; the first {MAX_TOOLS_PER_SERVER} are offered "
                                    "(each one's schema is in every prompt)"]


def test_a_call_that_never_answers_or_kills_its_server_is_a_one_line_result(tmp_path):
    dying = script_server(tmp_path, "dying", """
import os, time
from mcp.server.mcpserver import MCPServer
server = MCPServer("dying")
@server.tool(description="never answers")
def hang() -> str:
    time.sleep(3600)
    return "late"
@server.tool(description="exits in the middle of its call")
def crash() -> str:
    os._exit(9)
server.run("stdio")
""")
    with ToolRegistry.open(ToolSettings(servers=(dying,), timeout=3)) as registry:
        started = time.monotonic()
        late = registry.call(ToolCall("hang", {}))
        assert late.error and late.text == "MCP server dying failed on hang: Request 'tools/call' timed out"
        gone = registry.call(ToolCall("crash", {}))
        assert gone.error and gone.text == "MCP server dying failed on crash: Connection closed"
        after = registry.call(ToolCall("hang", {}))  # the server is gone: said at once, no wait
        assert after.error and "\n" not in after.text and time.monotonic() - started < 20
