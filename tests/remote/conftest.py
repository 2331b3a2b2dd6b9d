"""A real llama-server (and rpc-server), built from the llama.cpp that the installed
llama-cpp-python vendors (chatapp.llama_tools), running the real default model.

The session's server matches the in-process tests: the same context (1024), flash attention
on (as the in-process backend runs it; with and without, the numbers differ), prompt batches
of 256 as the in-process prefill, one slot, and a temporary --slot-save-path.
Every process started here is stopped afterwards, a failing test included; on Linux it also
dies with the test process (PR_SET_PDEATHSIG).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from chatapp.config import Settings
from chatapp.engine.machine.hardware import physical_cores

from .rewriting_proxy import RewritingProxy

N_CTX = 1024
SETTINGS = Settings(n_ctx=N_CTX, temperature=0.0, max_tokens=24, system_prompt="You are a concise assistant.")
START_LIMIT = 180.0
"""Seconds a server may take to start before the fixture gives up (a guard, not a measurement)."""
_REAL_FOLDERS = {name: os.environ.get(name) for name in ("HOME", "XDG_CACHE_HOME")}
"""The home and cache folders as the test run started, before tests point them at tmp_path:
the built programs live there."""


def tools_dir() -> Path:
    """llama-server and rpc-server for this llama-cpp-python, built once and cached."""
    from chatapp.llama_tools import ensure_tools

    saved = {name: os.environ.get(name) for name in _REAL_FOLDERS}
    for name, value in _REAL_FOLDERS.items():
        _set_env(name, value)
    try:
        return ensure_tools()
    finally:
        for name, value in saved.items():
            _set_env(name, value)


def _set_env(name: str, value: str | None) -> None:
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _die_with_parent() -> None:
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


@dataclass
class Process:
    """A program this test run started, with its output in a log file."""

    args: list[str]
    log: Path
    popen: subprocess.Popen

    @classmethod
    def start(cls, args: list[str], log: Path) -> "Process":
        with open(log, "wb") as out:
            popen = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                     preexec_fn=_die_with_parent)
        return cls(args, log, popen)

    def tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self) -> None:
        if self.popen.poll() is None:
            self.popen.terminate()
            try:
                self.popen.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait()


@dataclass
class LlamaServer(Process):
    url: str = ""
    slot_dir: Path | None = None

    def wait_ready(self) -> None:
        """Until /health says the model is loaded; fails when the process dies first."""
        deadline = time.monotonic() + START_LIMIT
        while time.monotonic() < deadline:
            if self.popen.poll() is not None:
                pytest.fail(f"llama-server exited with {self.popen.returncode}:\n{self.tail()}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{self.url}/health", timeout=2).status_code == 200:
                    return
            time.sleep(0.1)
        self.stop()
        pytest.fail(f"llama-server did not start within {START_LIMIT:g} s:\n{self.tail()}")


def start_llama_server(model: Path, folder: Path, *extra: str, n_ctx: int = N_CTX, slot_files: bool = True,
                       wait: bool = True) -> LlamaServer:
    folder.mkdir(parents=True, exist_ok=True)
    port = free_port()
    slot_dir = folder / "slots" if slot_files else None
    args = [str(tools_dir() / "llama-server"), "-m", str(model), "--host", "127.0.0.1", "--port", str(port),
            "-np", "1", "-c", str(n_ctx), "-fa", "on", "-b", "256", "-ub", "256", "-t", str(physical_cores()),
            *extra]
    if slot_dir is not None:
        slot_dir.mkdir(exist_ok=True)
        args += ["--slot-save-path", str(slot_dir)]
    process = Process.start(args, folder / f"llama-server-{port}.log")
    server = LlamaServer(process.args, process.log, process.popen, url=f"http://127.0.0.1:{port}", slot_dir=slot_dir)
    if wait:
        server.wait_ready()
    return server


@pytest.fixture(scope="session")
def llama_server(default_model_path, tmp_path_factory) -> Iterator[LlamaServer]:
    """The session's llama-server on the default model (context 1024, slot files on)."""
    server = start_llama_server(default_model_path, tmp_path_factory.mktemp("llama-server"))
    yield server
    server.stop()


@pytest.fixture
def another_server(default_model_path, tmp_path) -> Iterator:
    """Start more llama-servers for one test (other options, or to kill); all stopped after it."""
    started: list[Process] = []

    def start(*extra: str, model: Path | None = None, **options) -> LlamaServer:
        server = start_llama_server(model or default_model_path, tmp_path / f"server-{len(started)}", *extra,
                                    **options)
        started.append(server)
        return server

    yield start
    for process in started:
        process.stop()


@pytest.fixture
def proxy(llama_server) -> Iterator[RewritingProxy]:
    """A proxy in front of the session's llama-server that rewrites what a test tells it to."""
    rewriting = RewritingProxy(llama_server.url)
    yield rewriting
    rewriting.close()


@pytest.fixture
def server_settings(llama_server) -> Settings:
    return SETTINGS.replace(server=llama_server.url)


def chatapp_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {**os.environ, "COLUMNS": "200", **(extra or {})}
    for name in ("CHATAPP_SERVER", "CHATAPP_API_KEY"):
        if extra is None or name not in extra:
            env.pop(name, None)
    return env


@pytest.fixture
def chatapp_run(isolated_env):
    """Run the installed `chatapp` script as a user would (XDG folders in tmp_path)."""
    exe = Path(sys.executable).with_name("chatapp")

    def run(*args: str, env: dict[str, str] | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
        return subprocess.run([str(exe), *args], capture_output=True, text=True, env=chatapp_env(env),
                              timeout=timeout, check=False)

    return run


@pytest.fixture
def chatapp_popen(isolated_env) -> Iterator:
    """Start the `chatapp` script without waiting; every one is stopped after the test."""
    exe = Path(sys.executable).with_name("chatapp")
    started: list[subprocess.Popen] = []

    def start(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen:
        popen = subprocess.Popen([str(exe), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 env=chatapp_env(env), preexec_fn=_die_with_parent)
        started.append(popen)
        return popen

    yield start
    for popen in started:
        if popen.poll() is None:
            popen.kill()
        popen.communicate()
