"""`chatapp tools list` and `chatapp tools import`, end to end with a real MCP server."""

import json
import sys
from pathlib import Path

SERVER_SCRIPT = Path(__file__).parents[1] / "data" / "mcp_test_server.py"


def write_config(isolated_dirs, text: str) -> Path:
    path = Path(isolated_dirs["XDG_CONFIG_HOME"]) / "chatapp" / "config.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_tools_list_shows_every_tool_with_its_server_and_token_cost(chatapp_exe, isolated_dirs, tmp_path):
    write_config(isolated_dirs, f'[tools]\nroots = ["{tmp_path}"]\ndisabled = ["list_folder"]\n\n'
                                f'[mcp_servers.test]\ncommand = "{sys.executable}"\nargs = ["{SERVER_SCRIPT}"]\n')
    out = chatapp_exe("tools", "list", "--json")
    assert out.returncode == 0, out.stderr
    listed = json.loads(out.stdout)
    rows = {row["name"]: row for row in listed["tools"]}
    assert list(rows) == ["current_time", "read_file", "list_folder", "add", "environment", "big"]
    assert rows["add"]["server"] == "test" and rows["current_time"]["server"] == "builtin"
    assert rows["list_folder"]["enabled"] is False and rows["list_folder"]["tokens"] is None
    assert all(row["tokens"] > 10 for row in listed["tools"] if row["enabled"])
    assert listed["format"] == "generic" and listed["glue_tokens"] > 0
    assert listed["total_tokens"] == listed["glue_tokens"] + sum(r["tokens"] or 0 for r in listed["tools"])
    table = chatapp_exe("tools", "list")
    assert table.returncode == 0 and "add" in table.stdout and "in every prompt" in table.stdout


def test_a_server_that_cannot_start_is_one_line(chatapp_exe, isolated_dirs):
    write_config(isolated_dirs, '[mcp_servers.gone]\ncommand = "/no/such/program"\n')
    out = chatapp_exe("tools", "list", "--no-cost")
    assert out.returncode == 0
    assert "current_time" in out.stdout
    assert [line for line in out.stderr.splitlines() if "gone" in line] == \
        [line for line in out.stderr.splitlines() if line.startswith("chatapp: MCP server gone could not start")]


def test_tools_import_adds_another_apps_servers(chatapp_exe, isolated_dirs, tmp_path):
    config = write_config(isolated_dirs, "# mine\nmax_tokens = 64\n")
    desktop = tmp_path / "claude_desktop_config.json"
    desktop.write_text(json.dumps({"mcpServers": {"test": {"command": sys.executable, "args": [str(SERVER_SCRIPT)]}}}))
    out = chatapp_exe("tools", "import", str(desktop))
    assert out.returncode == 0, out.stderr
    assert "added [mcp_servers.test]" in out.stdout
    assert config.read_text().startswith("# mine\nmax_tokens = 64\n")
    listed = json.loads(chatapp_exe("tools", "list", "--json", "--no-cost").stdout)
    assert [r["name"] for r in listed["tools"] if r["server"] == "test"] == ["add", "environment", "big"]
    again = chatapp_exe("tools", "import", str(desktop))
    assert again.returncode == 2 and "already has [mcp_servers.test]" in again.stderr
