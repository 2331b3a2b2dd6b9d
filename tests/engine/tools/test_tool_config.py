"""[tools] and [mcp_servers.NAME] in the config file, and the mcpServers JSON other apps use."""

import json

import pytest

from chatapp.config import load_settings
from chatapp.engine.tools.servers import McpServer, add_servers, from_table, load_tool_settings, parse_mcp_json
from chatapp.errors import ConfigError

CONFIG = """\
# my settings
temperature = 0.2

[tools]
roots = ["~/notes"]
timeout = 5

[mcp_servers.files]
command = "npx"
args = ["-y", "server-filesystem", "/tmp"]
env = { LOG = "warn" }
cwd = "/tmp"

[mcp_servers.web]
url = "http://127.0.0.1:8000/mcp"
enabled = false
"""


def test_the_tables_read_beside_the_settings(tmp_path):
    path = tmp_path / "config.toml"
    path.write_text(CONFIG)
    assert load_settings(path).temperature == 0.2  # the tables are not unknown settings
    tools = load_tool_settings(path)
    assert tools.roots == ("~/notes",) and tools.timeout == 5.0
    files, web = tools.servers
    assert (files.name, files.command, files.args, files.env, files.cwd, files.transport) == \
        ("files", "npx", ("-y", "server-filesystem", "/tmp"), {"LOG": "warn"}, "/tmp", "stdio")
    assert (web.url, web.enabled, web.transport) == ("http://127.0.0.1:8000/mcp", False, "http")


@pytest.mark.parametrize("table, says", [
    ({"mcp_servers": {"x": {}}}, "needs either a command"),
    ({"mcp_servers": {"x": {"command": "a", "url": "http://b"}}}, "not both"),
    ({"mcp_servers": {"x": {"url": "ftp://b"}}}, "http://"),
    ({"mcp_servers": {"x": {"command": "a", "args": "b"}}}, "list of strings"),
    ({"mcp_servers": {"x": {"command": "a", "colour": 1}}}, "unknown key 'colour'"),
    ({"mcp_servers": {"bad name": {"command": "a"}}}, "server name"),
    ({"tools": {"timeout": 0}}, "timeout"),
    ({"tools": {"root": []}}, "unknown key 'root'"),
])
def test_bad_tables_are_one_line(table, says):
    with pytest.raises(ConfigError, match=says):
        from_table(table)


CLAUDE = {"mcpServers": {
    "filesystem": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem", "/Users/me"]},
    "github": {"command": "docker", "args": ["run", "-i", "ghcr.io/github/github-mcp-server"],
               "env": {"GITHUB_TOKEN": "t"}, "disabled": True},
    "remote": {"url": "https://example.com/mcp", "headers": {"Authorization": "Bearer k"}},
}}


def test_the_mcp_servers_json_of_other_apps_imports():
    servers = parse_mcp_json(json.dumps(CLAUDE))
    assert [s.name for s in servers] == ["filesystem", "github", "remote"]
    assert servers[1].env == {"GITHUB_TOKEN": "t"} and not servers[1].enabled
    assert servers[2].url == "https://example.com/mcp" and servers[2].headers == {"Authorization": "Bearer k"}
    assert parse_mcp_json(json.dumps(CLAUDE["mcpServers"]))[0] == servers[0]  # the object alone (LM Studio)


def test_an_sse_server_or_broken_json_is_one_line():
    with pytest.raises(ConfigError, match="SSE"):
        parse_mcp_json(json.dumps({"mcpServers": {"s": {"type": "sse", "url": "http://x/sse"}}}))
    with pytest.raises(ConfigError, match="not JSON"):
        parse_mcp_json("{nope")


def test_imported_servers_are_written_keeping_the_users_comments(tmp_path):
    path = tmp_path / "config.toml"
    path.write_text(CONFIG)
    add_servers(parse_mcp_json(json.dumps(CLAUDE)), path)
    text = path.read_text()
    assert text.startswith("# my settings\ntemperature = 0.2\n")
    names = [s.name for s in load_tool_settings(path).servers]
    assert names == ["files", "web", "filesystem", "github", "remote"]
    with pytest.raises(ConfigError, match="already has"):
        add_servers([McpServer("files", command="x")], path)
    add_servers([McpServer("files", command="x")], path, replace=True)
    assert load_tool_settings(path).servers[0].command == "x"
    assert oct(path.stat().st_mode & 0o777) == "0o600"


def test_the_tool_choice_at_start_is_read_and_checked():
    assert from_table({}).choice == "none"
    assert from_table({"tools": {"choice": "auto"}}).choice == "auto"
    assert from_table({"tools": {"choice": "add"}}).choice == "add"
    for bad in ("", "two words", 3, "x" * 200):
        with pytest.raises(ConfigError, match="choice must be none, auto, required or a tool's name"):
            from_table({"tools": {"choice": bad}})
