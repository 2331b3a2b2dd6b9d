"""The command line as users of llm, ollama and llama-cli expect it, through the real chatapp:
a question piped on stdin, llama-cli's short options, every option's help and default, a tree
that indents only at forks, `models list` readable in a pipe at 80 columns, and a mistyped
command named in one line with the closest real one."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

EXE = Path(sys.executable).with_name("chatapp")


@pytest.fixture
def run(isolated_dirs):
    """The installed chatapp with `stdin` (text, or a file object such as a pty) and `columns`."""

    def run(*args: str, stdin=None, columns: int = 200, env: dict[str, str] | None = None,
            timeout: float = 300) -> subprocess.CompletedProcess[str]:
        full = {**os.environ, **isolated_dirs, "COLUMNS": str(columns), **(env or {})}
        if stdin is None:
            kwargs = {"stdin": subprocess.DEVNULL}
        elif isinstance(stdin, str):
            kwargs = {"input": stdin}
        else:
            kwargs = {"stdin": stdin}
        return subprocess.run([str(EXE), *args], capture_output=True, text=True, env=full, timeout=timeout,
                              **kwargs)

    return run


def one_line(out: subprocess.CompletedProcess) -> str:
    assert "Traceback" not in out.stderr, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    return lines[0]


# --- a mistyped command --------------------------------------------------------------------------
@pytest.mark.parametrize(("args", "expected"), [
    (("askk", "hi"), "chatapp: no such command 'askk'; did you mean 'ask'?"),
    (("sessions", "lst"), "chatapp: no such command 'sessions lst'; did you mean 'sessions list'?"),
    (("tok", "x"), "chatapp: no such command 'tok'; did you mean 'tokenize'?"),
    (("models", "pul"), "chatapp: no such command 'models pul'; did you mean 'models pull'?"),
    (("frobnicate",), "chatapp: no such command 'frobnicate'; the commands are: chat, ask, tokenize, neighbours, "
                      "models, config, bench, themes, sessions"),
])
def test_a_mistyped_command_is_one_line_naming_the_closest_real_one(run, args, expected):
    out = run(*args)
    assert out.returncode == 2 and one_line(out) == expected and out.stdout == ""


def test_a_group_lists_its_commands_without_breaking_lines_mid_sentence(run):
    out = run("sessions", "--help", columns=80)
    assert out.returncode == 0, out.stderr
    assert "is cut at 20,000 characters; export has all of it" in out.stdout, out.stdout
    assert "the environment or a default" in run("config", "--help", columns=80).stdout
