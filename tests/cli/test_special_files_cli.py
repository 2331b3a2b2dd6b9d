"""Special files where chatapp reads a file it did not write, through the real chatapp: a named
pipe as the config file, a KV state, an Ollama blob or manifest, or the LM Studio pointer; the
config linked to /dev/zero or far too big. Each is refused in one line (or, for a store, one
problem on its model) and the command goes on or ends at once: never a hang, never a read
without end. Every run has a short timeout, so a regression fails here instead of hanging."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.engine.models.stores import LMSTUDIO_NAME, OLLAMA_NAME, build
from tests.cli.one_line import one_line

EXE = Path(sys.executable).with_name("chatapp")
LIMIT = 90
"""Seconds any one run may take: a few for a command, a model load and a short reply on a busy
machine; a read that waits on a pipe never ends."""
ASK = ("--json", "--temperature", "0", "--max-tokens", "4", "--ctx", "512", "--threads", "1")


@pytest.fixture
def run(isolated_dirs):
    def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        full = {**os.environ, **isolated_dirs, "COLUMNS": "200", **(env or {})}
        return subprocess.run([str(EXE), *args], capture_output=True, text=True, env=full, timeout=LIMIT)

    return run


def config_file(isolated_dirs) -> Path:
    path = Path(isolated_dirs["XDG_CONFIG_HOME"]) / "chatapp" / "config.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


@pytest.mark.parametrize("kind", ["fifo", "dev-zero", "too-big"])
def test_a_config_file_that_is_no_file_is_refused_in_one_line_and_config_path_still_answers(
        run, isolated_dirs, kind):
    path = config_file(isolated_dirs)
    if kind == "fifo":
        os.mkfifo(path)
        why = "it is a named pipe, not a regular file"
    elif kind == "dev-zero":
        path.symlink_to("/dev/zero")
        why = "it is a character device, not a regular file"
    else:
        path.write_text("# " + "x" * (2 << 20) + "\n")
        why = "it is 2 MiB, more than the 1 MiB chatapp reads of it"
    out = run("config", "path")  # every command read the config first, this one included
    assert out.returncode == 0 and out.stdout.strip() == str(path) and out.stderr == "", out.stderr
    for args in (("config", "show"), ("sessions", "list"), ("ask", "hi", *ASK)):
        out = run(*args)
        assert out.returncode == 2 and one_line(out) == f"chatapp: Config: cannot read {path}: {why}", args


def test_a_named_pipe_as_a_sessions_kv_state_is_not_waited_on(run, isolated_dirs):
    first = run("ask", "--session", "s", "Name a fruit.", *ASK)
    assert first.returncode == 0, first.stderr
    states = sorted((Path(isolated_dirs["XDG_DATA_HOME"]) / "chatapp" / "sessions" / "states").glob("*.kvstate"))
    assert states
    for state in states:
        state.unlink()
        os.mkfifo(state)
    out = run("ask", "--session", "s", "Name a colour.", *ASK)
    assert out.returncode == 0 and "Traceback" not in out.stderr, out.stderr
    [record] = [json.loads(line) for line in out.stdout.splitlines()]
    assert record["restored_tokens"] == 0 and record["reply"]
    assert "named pipe" in out.stderr  # the resume says why nothing was restored, in one line
    shown = run("sessions", "show", "s")
    assert shown.returncode == 0 and "Name a colour." in shown.stdout


@pytest.fixture
def stores(tmp_path, default_model_path):
    built = build(tmp_path / "stores", default_model_path)
    return built, {**built.env(), "HF_HUB_OFFLINE": "1"}


def test_a_named_pipe_as_an_ollama_blob_or_manifest_is_one_problem_not_a_hang(run, stores):
    built, env = stores
    [blob] = [p for p in (built.ollama / "blobs").iterdir() if p.stat().st_size > 1 << 20]
    blob.unlink()
    os.mkfifo(blob)
    piped = built.ollama / "manifests" / "registry.ollama.ai" / "library" / "piped" / "latest"
    piped.parent.mkdir(parents=True)
    os.mkfifo(piped)  # not a file: not listed at all
    listed = run("models", "list", "--json", env=env)
    assert listed.returncode == 0, listed.stderr
    rows = {row["name"]: row for row in json.loads(listed.stdout)}
    problem = rows[OLLAMA_NAME]["problem"]
    assert "is missing or unreadable (it is a named pipe, not a regular file)" in problem, problem
    assert not any("piped" in name for name in rows)
    out = run("ask", "--model", OLLAMA_NAME, "hi", *ASK, env=env)
    assert out.returncode == 2 and one_line(out).startswith(f"chatapp: Model: {OLLAMA_NAME}: its model blob"), \
        out.stderr
    assert "named pipe" in out.stderr


def test_a_named_pipe_as_the_lm_studio_pointer_falls_back_to_the_default_home(run, stores):
    built, env = stores
    pointer = built.home / ".lmstudio-home-pointer"
    pointer.unlink()
    os.mkfifo(pointer)
    listed = run("models", "list", "--json", env=env)
    assert listed.returncode == 0 and "Traceback" not in listed.stderr, listed.stderr
    names = {row["name"] for row in json.loads(listed.stdout)}
    assert LMSTUDIO_NAME not in names and OLLAMA_NAME in names  # its home is unknown; the rest is listed
    out = run("ask", "--model", LMSTUDIO_NAME, "hi", *ASK, env=env)
    assert out.returncode == 2 and one_line(out).startswith(f"chatapp: Model: {LMSTUDIO_NAME} is not in"), \
        out.stderr
