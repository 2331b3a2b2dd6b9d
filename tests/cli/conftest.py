from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner


@pytest.fixture(autouse=True)
def isolated_dirs(tmp_path, monkeypatch) -> dict[str, str]:
    """Point platformdirs at tmp_path so no test reads or writes the real config."""
    env = {}
    for var, folder in (("XDG_CONFIG_HOME", "config"), ("XDG_DATA_HOME", "data"), ("XDG_CACHE_HOME", "cache")):
        env[var] = str(tmp_path / folder)
        monkeypatch.setenv(var, env[var])
    return env


@functools.cache
def _cli_app() -> typer.Typer:
    from chatapp import cli

    # Registration appends to a module-level app, so it must happen once per process.
    cli._register_subcommands()
    return cli.app


@pytest.fixture
def invoke():
    runner = CliRunner()

    def run(*args: str, env: dict[str, str] | None = None):
        return runner.invoke(_cli_app(), list(args), env=env)

    return run


@pytest.fixture
def chatapp_exe(isolated_dirs):
    """Run the installed `chatapp` script end to end, as a user would."""
    exe = Path(sys.executable).with_name("chatapp")
    if not exe.exists():
        pytest.fail(f"{exe} is missing: install the package with `make install`")

    def run(*args: str, one_stream: bool = False) -> subprocess.CompletedProcess[str]:
        """`one_stream`: stderr into stdout, in the order written, as a terminal shows them."""
        env = {**os.environ, **isolated_dirs, "COLUMNS": "200"}
        return subprocess.run([str(exe), *args], check=False, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT if one_stream else subprocess.PIPE, text=True, env=env,
                              timeout=300)

    return run


def records(out: subprocess.CompletedProcess) -> list[dict]:
    """The JSON lines of a `chatapp ask --json` run that succeeded."""
    assert out.returncode == 0, out.stderr
    return [json.loads(line) for line in out.stdout.splitlines()]
