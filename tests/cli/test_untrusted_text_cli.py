"""Untrusted text never reaches the terminal as control, nor its markup as markup: the same
hostile strings put where chatapp reads text it did not write (a saved session's messages, name
and model, a GGUF's general.name and file name, an MCP tool's description, a reply the real model
decodes) and every command that prints them, then the TUI's transcript and sessions dialog.

A control character is shown as its backslash escape (ESC as \\x1b, chatapp.format.visible_text);
markup such as [bold] or [@click=app.quit] is shown as the text it is."""

from __future__ import annotations

import json
import re
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from textual.geometry import Region

from chatapp import paths
from chatapp.engine.events import Message
from chatapp.engine.sessions.store import ModelIdentity, SessionStore, Snapshot
from tests.cli.conftest import records

HOSTILE = ["[bold]x[/bold]", "[@click=app.quit]q[/]", "[link=http://x]y[/link]", "\x1b]0;pwned title\x07",
           "\x1b]52;c;cm0gLXJmIH4=\x07", "\x1b[2J", "\x9b31m"]
TEXT = "start " + " ".join(HOSTILE) + " end"
MARKUP = ["[bold]x[/bold]", "[@click=app.quit]q[/]", "[link=http://x]y[/link]"]
RAW_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")
"""What must not reach the terminal: every C0 character but tab and newline, DEL and every C1."""
ASK = ("--temperature", "0", "--max-tokens", "4", "--ctx", "1024", "--threads", "1")


def no_control(out: subprocess.CompletedProcess) -> str:
    assert out.returncode == 0, out.stderr
    for stream, text in (("stdout", out.stdout), ("stderr", out.stderr)):
        found = RAW_CONTROL.findall(text)
        assert not found, f"{stream} holds raw control characters {found!r}: {text[:2000]!r}"
    return out.stdout


def shows_markup(text: str) -> None:
    flat = re.sub(r"\s+", "", text)  # a table folds a long cell over lines
    for markup in MARKUP:
        assert markup in flat, f"{markup!r} not shown as text in {text[:2000]!r}"


def strings(value):
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from strings(item)


@pytest.fixture
def hostile_sessions() -> None:
    """Session "h" with the hostile text in a question, a reply, a thought, the system prompt and
    the model's name; and a session whose name an edited database made hostile."""
    store = SessionStore.open(paths.sessions_dir())
    model = ModelIdentity("smol" + TEXT, "/m" + TEXT + ".gguf", "ab" * 32, "Q4_1" + HOSTILE[5])
    messages = [Message("system", "sys " + TEXT), Message("user", "q " + TEXT),
                Message("assistant", "a " + TEXT, thinking="t " + TEXT)]
    store.save(Snapshot("h", model, messages, 1, 0))
    store.save(Snapshot("renamed", model, messages[:2], 1, 0))
    with sqlite3.connect(paths.sessions_dir() / "sessions.db") as conn:
        conn.execute("UPDATE sessions SET name = ? WHERE name = 'renamed'", ("n" + TEXT,))


@pytest.mark.parametrize("command", [("list",), ("show", "h"), ("tree", "h"), ("export", "h"),
                                     ("export", "h", "--all-branches")])
def test_sessions_commands_print_hostile_text_as_text(chatapp_exe, hostile_sessions, command):
    out = no_control(chatapp_exe("sessions", *command))
    assert "\\x1b]0;pwned" in out.replace("\n", "")
    if command[0] != "export":  # Markdown keeps brackets as they are, for a Markdown reader
        shows_markup(out)


@pytest.mark.parametrize("command", [("list", "--json"), ("tree", "h", "--json"), ("export", "h", "-f", "json")])
def test_sessions_json_keeps_hostile_text_exact_as_json_escapes(chatapp_exe, hostile_sessions, command):
    out = no_control(chatapp_exe("sessions", *command))
    assert any(TEXT in value for value in strings(json.loads(out)))  # the values read back are the exact text


def test_models_commands_show_a_hostile_gguf_name_and_file_name(chatapp_exe, default_model_path, tmp_path):
    """general.name rewritten by the gguf package's own gguf-new-metadata, on a copy whose file
    name holds the hostile strings too, in the models folder `models list` reads."""
    paths.models_dir().mkdir(parents=True)
    target = paths.models_dir() / ("m" + "".join(HOSTILE[3:]) + "[bold]x.gguf")  # a name holds no slash
    new_metadata = Path(sys.executable).with_name("gguf-new-metadata")
    made = subprocess.run([str(new_metadata), "--general-name", TEXT, "--force", str(default_model_path),
                           str(tmp_path / "copy.gguf")], capture_output=True, text=True, timeout=300)
    assert made.returncode == 0 and (tmp_path / "copy.gguf").exists(), (made.stdout, made.stderr)
    (tmp_path / "copy.gguf").rename(target)
    listed = no_control(chatapp_exe("models", "list"))
    assert "\\x1b" in listed
    for command in (("info", str(target)), ("anatomy", str(target))):
        shown = no_control(chatapp_exe("models", *command))
        assert "\\x1b]0;pwned" in re.sub(r"\s+", "", shown)
        shows_markup(shown)
    info = json.loads(no_control(chatapp_exe("models", "info", str(target), "--json")))
    assert info["name"] == TEXT


HOSTILE_SERVER = '''
from mcp.server.mcpserver import MCPServer

server = MCPServer("hostile")


@server.tool(description={description!r})
def echo(text: str) -> str:
    return {result!r}


server.run("stdio")
'''


def test_tools_list_shows_a_hostile_mcp_description_as_text(chatapp_exe, isolated_dirs, tmp_path):
    script = tmp_path / "hostile_server.py"
    script.write_text(HOSTILE_SERVER.format(description="d " + TEXT, result="r " + TEXT))
    config = Path(isolated_dirs["XDG_CONFIG_HOME"]) / "chatapp" / "config.toml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(f'[mcp_servers.hostile]\ncommand = "{sys.executable}"\nargs = ["{script}"]\n')
    out = no_control(chatapp_exe("tools", "list", "--no-cost"))
    assert "\\x1b]0;pwned" in re.sub(r"\s+", "", out)
    shows_markup(out)
    listed = json.loads(no_control(chatapp_exe("tools", "list", "--no-cost", "--json")))
    assert any(tool["description"] == "d " + TEXT for tool in listed["tools"])


def test_ask_streams_a_reply_holding_escape_as_text(chatapp_exe):
    """A real reply with ESC in it: the turn branches at token 0 with the tokenizer's own ESC
    token forced in, then the model decodes on. Plain, the reply shows \\x1b; --json keeps it."""
    [escape_token] = [t["id"] for t in json.loads(chatapp_exe("tokenize", "\x1b", "--json").stdout)
                      if t["piece"] == "\x1b"]
    [first] = records(chatapp_exe("ask", "--session", "t", "--json", *ASK, "Say hi"))
    out = chatapp_exe("ask", "--session", "t", *ASK, "--branch-from", first["message_id"], "--at-token", "0",
                      "--token", str(escape_token), "-")
    assert no_control(out).startswith("\\x1b")
    [again] = records(chatapp_exe("ask", "--session", "t", "--json", *ASK, "--branch-from", first["message_id"],
                                  "--at-token", "0", "--token", str(escape_token), "-"))
    assert again["reply"].startswith("\x1b")


def drawn(widget) -> str:
    """What a widget draws, as the terminal would get it (its strips' text), line by line."""
    return "\n".join(strip.text for strip in widget.render_lines(Region(0, 0, *widget.size)))


async def test_the_tui_draws_hostile_text_as_text(chatapp_exe, default_model_path):
    """Two real turns saved by ask, their text and one session's name then edited in the database
    (as an imported or hand-edited one would hold them): the transcript and the sessions dialog
    (F6) draw the escapes as text and the markup as the brackets it is."""
    from chatapp.config import Settings
    from chatapp.engine.opening import open_engine
    from chatapp.ui.app import ChatApp
    from chatapp.ui.screens.sessions import SessionsScreen
    from chatapp.ui.widgets.transcript import Reply, UserMessage
    from tests.ui._helpers import WIDE, Messages, opened, wait_until

    for name in ("h", "other"):
        records(chatapp_exe("ask", "--session", name, "--json", *ASK, "Say hi"))
    with sqlite3.connect(paths.sessions_dir() / "sessions.db") as conn:
        conn.execute("UPDATE messages SET content = ?", (TEXT,))
        conn.execute("UPDATE sessions SET name = ? WHERE name = 'other'", ("n" + TEXT,))
    settings = Settings().replace(n_ctx=1024, temperature=0.0, max_tokens=8, threads=1)
    app, seen = ChatApp(open_engine(settings, str(default_model_path)), settings=settings, session="h",
                        opener=None), Messages()
    try:
        async with app.run_test(size=WIDE, message_hook=seen) as pilot:
            await opened(pilot, seen)
            await wait_until(pilot, lambda: app.query(UserMessage) and app.query(Reply))
            await pilot.pause()
            for widget in (*app.query(UserMessage), *app.query(Reply)):
                text = drawn(widget)
                assert not RAW_CONTROL.findall(text), (type(widget).__name__, text)
                assert "\\x1b]0;pwned" in text, text
                shows_markup(text)
            await pilot.press("f6")
            await wait_until(pilot, lambda: isinstance(app.screen, SessionsScreen))
            await pilot.pause()
            table = app.screen.query_one("DataTable")
            text = drawn(table)
            assert not RAW_CONTROL.findall(text), text
            # the name column wraps: its lines, read down the column, are the name as text
            name_width = table.ordered_columns[0].get_render_width(table)
            names = "".join(line[:name_width] for line in text.splitlines())
            assert "nstart[bold]x[/bold][@click=app.quit]q[/]" in re.sub(r"\s+", "", names), text
            assert isinstance(app.screen, SessionsScreen)  # a click on the name's [@click] quits nothing
    finally:
        app.release_engine()


def test_every_command_prints_through_the_one_safe_console():
    """The guard above holds only if no command builds a Rich console of its own."""
    commands = Path(__file__).parents[2] / "chatapp" / "commands"
    for path in [*commands.glob("*.py"), commands.parent / "cli.py"]:
        if path.name != "terminal.py":
            assert not re.search(r"(?<!Safe)Console\(", path.read_text()), f"{path} builds a rich Console"
