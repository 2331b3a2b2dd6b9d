"""A tool call approved through a real terminal (issue 38): chatapp in tmux with the tests' MCP
server in the config and the tool choice "add" set there, sent the bytes a terminal sends. The
approval dialog names the tool, its server and the full arguments; "d" denies (the model reads
the denial) and "o" runs the call once, its result drawn in the transcript."""

from __future__ import annotations

import re
import shutil
import sys
from pathlib import Path

import pytest

from tests.ui._tmux import Tmux

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux")

SERVER_SCRIPT = Path(__file__).parents[1] / "data" / "mcp_test_server.py"


@pytest.fixture
def term(isolated_env, tmp_path):
    config = tmp_path / "config" / "chatapp" / "config.toml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text('threads = 2\ntemperature = 0.0\nmax_tokens = 60\nincognito = true\n\n'
                      '[tools]\nchoice = "add"\ndisabled = ["big", "environment", "read_file", "list_folder"]\n\n'
                      f'[mcp_servers.test]\ncommand = "{sys.executable}"\nargs = ["{SERVER_SCRIPT}"]\n')
    opened = Tmux(dict(isolated_env), ["--ctx", "2048"], height=50)
    try:
        opened.wait_for("KV cache", 60)
        opened.wait_for("tools offered", 60)  # the config's choice opened the tools at start
        yield opened
    finally:
        opened.close()


def ask(term: Tmux, question: str) -> str:
    term.type(question)
    term.wait_for(question, 10)
    term.keys("Enter")
    return term.wait_for("The model asks to run add from test", 120)


def test_a_call_is_approved_once_with_o_and_its_result_is_drawn(term):
    screen = ask(term, "What is 17 plus 25?")
    a, b = (int(n) for n in re.search(r'"a":\s*(-?\d+).*?"b":\s*(-?\d+)', screen, re.S).groups())
    term.keys("o")
    term.wait_gone("The model asks to run add from test", 30)
    screen = term.wait_for("tool · add (test)", 60)  # the result, titled with its tool and server
    rows = screen.split("\n")
    titled = next(i for i, row in enumerate(rows) if "tool · add (test)" in row)
    assert rows[titled + 1][:88].strip(" █│") == str(a + b)


def test_a_call_denied_with_d_runs_nothing_and_the_model_reads_the_denial(term):
    ask(term, "What is 17 plus 25?")
    term.keys("d")
    term.wait_gone("The model asks to run add from test", 30)
    screen = term.wait_for("tool · add: ", 60)  # the result's title says why it did not run
    assert "denied" in screen.split("tool · add: ")[1].split("\n")[0]
