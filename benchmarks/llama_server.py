"""A llama-server for a benchmark to compare with: on a free port of 127.0.0.1, answering /health
before the caller's first request, stopped when the caller is done.

Four benchmarks (spec_vs_llama_server, tools, next_token, remote_speed) each picked a port,
started the server and polled /health in a copy of their own; this is that code once.
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

READY_WITHIN_S = 60.0


@contextlib.contextmanager
def llama_server(model: Path, *args: str, log: Path | None = None, binary: Path | None = None) -> Iterator[str]:
    """The server's base URL, once /health answers 200. `args` go after the model, host and port;
    `log` takes its output (none kept without it); `binary`: llama-server built by
    chatapp.llama_tools unless given. A server that exits or is not ready within a minute ends the
    benchmark with one line (SystemExit) that names its log."""
    if binary is None:
        from chatapp.llama_tools import ensure_tools

        binary = ensure_tools() / "llama-server"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    with open(log, "w") if log is not None else contextlib.nullcontext(subprocess.DEVNULL) as out:
        process = subprocess.Popen([str(binary), "-m", str(model), "--host", "127.0.0.1", "--port", str(port), *args],
                                   stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT)
        try:
            _wait_ready(url, process, log)
            yield url
        finally:
            process.terminate()
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def _wait_ready(url: str, process: subprocess.Popen, log: Path | None) -> None:
    where = f"; its log: {log}" if log is not None else ""
    deadline = time.monotonic() + READY_WITHIN_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"llama-server exited ({process.returncode}){where}")
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=1) as response:
                if response.status == 200:
                    return
        except OSError:  # not listening yet, or 503 while it loads the model
            pass
        time.sleep(0.1)
    raise SystemExit(f"llama-server was not ready within {READY_WITHIN_S:.0f} s{where}")
