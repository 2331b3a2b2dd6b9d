"""`chatapp tools list` and `chatapp tools import`, end to end with a real MCP server."""

import json
import sys
from pathlib import Path

SERVER_SCRIPT = Path(__file__).parents[1] / "data" / "mcp_test_server.py"
TEST_SERVER = f'[mcp_servers.test]\ncommand = "{sys.executable}"\nargs = ["{SERVER_SCRIPT}"]\n'
"""The tests' MCP server as a config table."""


def write_config(isolated_dirs, text: str) -> Path:
    path = Path(isolated_dirs["XDG_CONFIG_HOME"]) / "chatapp" / "config.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_tools_list_shows_every_tool_with_its_server_and_token_cost(chatapp_exe, isolated_dirs, tmp_path):
    write_config(isolated_dirs, f'[tools]\nroots = ["{tmp_path}"]\ndisabled = ["list_folder"]\n\n'
                                + TEST_SERVER)
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


def test_ask_runs_only_allowed_calls_and_records_them(chatapp_exe, isolated_dirs):
    write_config(isolated_dirs, TEST_SERVER)
    out = chatapp_exe("ask", "--tool", "add", "--tool", "big", "--tool-choice", "add", "--allow-tool", "big",
                      "--temperature", "0", "-n", "60", "--json", "What is 17 plus 25?")
    assert out.returncode == 0, out.stderr
    records = [json.loads(line) for line in out.stdout.splitlines()]
    first = records[0]
    (call,) = first["tool_calls"]
    assert (call["name"], call["server"], call["approved"]) == ("add", "test", False)
    assert set(call["arguments"]) == {"a", "b"} and "denied" in call["result"] and call["result_tokens"] > 0
    assert set(first["tool_schema_tokens"]) == {"add", "big"} and all(first["tool_schema_tokens"].values())
    assert "refused a call of add (test): not allowed; --allow-tool add lets it run" in out.stderr
    assert records[1]["cached_tokens"] == first["kv_used"]  # the step after the result reuses the cache
    assert all("prefill_tokens" in r and "cached_tokens" in r for r in records)


def test_a_refusal_starts_its_own_line_in_a_terminal(chatapp_exe, isolated_dirs):
    """stdout and stderr on one terminal: the refusal comes while the call's text has no newline
    yet (the turn ends after its calls are approved or refused)."""
    write_config(isolated_dirs, TEST_SERVER)
    done = chatapp_exe("ask", "--tool", "add", "--tool-choice", "add", "--temperature", "0", "-n", "60",
                       "--incognito", "What is 17 plus 25?", one_stream=True)
    assert done.returncode == 0, done.stdout
    lines = done.stdout.splitlines()
    refusal = next(i for i, line in enumerate(lines) if "refused a call of add" in line)
    assert lines[refusal].startswith("refused a call of add (test)"), lines[refusal]
    assert lines[refusal - 1].rstrip().endswith("}")  # the call, on its own line above
    stats = next(i for i, line in enumerate(lines) if line.startswith("prompt "))
    assert refusal < stats and "" not in lines[refusal:stats]  # and no empty line for the reply's end


def test_ask_says_why_a_tool_loop_went_no_further(chatapp_exe, isolated_dirs):
    write_config(isolated_dirs, TEST_SERVER)
    out = chatapp_exe("ask", "--tool", "add", "--tool-choice", "add", "--allow-tool", "add", "--temperature", "0",
                      "-n", "6", "--incognito", "What is 17 plus 25?")
    assert out.returncode == 0, out.stderr
    assert "tool loop: the call was cut at the reply's token limit (max_tokens) before it was whole; it was " \
           "not run" in " ".join(out.stderr.split())


def test_tool_flags_without_a_tool_are_refused(chatapp_exe):
    out = chatapp_exe("ask", "--allow-tools", "hi")
    assert out.returncode == 2 and "go with --tool NAME or --tools" in out.stderr


def test_calls_and_results_are_kept_in_the_session_and_its_export(chatapp_exe, isolated_dirs):
    write_config(isolated_dirs, TEST_SERVER)
    out = chatapp_exe("ask", "--session", "calls", "--tool", "add", "--tool-choice", "add", "--allow-tool", "add",
                      "--temperature", "0", "-n", "40", "What is 17 plus 25?")
    assert out.returncode == 0, out.stderr
    exported = chatapp_exe("sessions", "export", "calls", "-f", "json")
    assert exported.returncode == 0 and "unreadable" not in exported.stderr + exported.stdout
    roles = [m["role"] for m in json.loads(exported.stdout)["messages"]]
    assert roles[:5] == ["system", "user", "assistant", "tool", "assistant"]
    assert "### tool" in chatapp_exe("sessions", "export", "calls", "-f", "md").stdout

    # the result edited: --edit names the tool message, and the model answers the new result beside the old
    tree = json.loads(chatapp_exe("sessions", "tree", "calls", "--json").stdout)
    result = next(m for m in tree if m["role"] == "tool")
    again = chatapp_exe("ask", "--session", "calls", "--tool", "add", "--edit", result["id"], "--temperature", "0",
                        "-n", "20", "--json", "1000")
    assert again.returncode == 0, again.stderr
    record = json.loads(again.stdout.splitlines()[0])
    assert record["action"] == "edit" and record["branch"] == "2/2" and record["prefill_tokens"] < 30
    tree = json.loads(chatapp_exe("sessions", "tree", "calls", "--json").stdout)
    results = [m for m in tree if m["role"] == "tool"]
    assert [m["content"] for m in results] == [result["content"], "1000"]
    assert {m["parent"] for m in results} == {result["parent"]} and [m["active"] for m in results] == [False, True]
    refused = chatapp_exe("ask", "--edit", result["id"], "x")
    assert refused.returncode == 2 and "--edit needs --session" in refused.stderr


def test_a_resumed_or_edited_tool_step_and_a_required_call_run_only_when_allowed(chatapp_exe, isolated_dirs,
                                                                                 tmp_path):
    """The server writes each call that really runs to a log: an approved call runs once; going on
    with the session, editing its question and --tool-choice required then run nothing that was
    not allowed again, and resuming never replays the calls it holds."""
    log = tmp_path / "calls.log"
    write_config(isolated_dirs, TEST_SERVER + f'env = {{ CALL_LOG = "{log}" }}\n')
    common = ("--temperature", "0", "-n", "40", "--json")
    first = chatapp_exe("ask", "--session", "s", "--tool", "add", "--tool-choice", "add", "--allow-tool", "add",
                        *common, "What is 17 plus 25?")
    assert first.returncode == 0, first.stderr
    assert log.read_text().splitlines() and len(log.read_text().splitlines()) == 1
    resumed = chatapp_exe("ask", "--session", "s", "--tool", "add", "--tool-choice", "required", *common,
                          "And 2 plus 3?")
    assert resumed.returncode == 0, resumed.stderr
    call = json.loads(resumed.stdout.splitlines()[0])["tool_calls"][0]
    assert call["approved"] is False and "refused a call of add (test): not allowed" in resumed.stderr
    question = next(m for m in json.loads(chatapp_exe("sessions", "tree", "s", "--json").stdout)
                    if m["role"] == "user")
    edited = chatapp_exe("ask", "--session", "s", "--tool", "add", "--tool-choice", "add", "--edit", question["id"],
                         *common, "What is 1 plus 1?")
    assert edited.returncode == 0, edited.stderr
    assert json.loads(edited.stdout.splitlines()[0])["tool_calls"][0]["approved"] is False
    assert len(log.read_text().splitlines()) == 1  # only the call that was allowed ever ran
