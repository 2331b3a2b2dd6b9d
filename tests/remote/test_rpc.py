"""Beyond one machine, on one machine: an rpc-server (a worker) and a llama-server that puts
every layer of the model on it with --rpc, with chatapp talking to the llama-server."""

from __future__ import annotations

import json
import socket
import time

import psutil
import pytest

from chatapp.engine.machine.hardware import physical_cores

from .conftest import START_LIMIT, Process, free_port, start_llama_server, tools_dir


@pytest.fixture(scope="module")
def rpc_cluster(default_model_path, tmp_path_factory):
    folder = tmp_path_factory.mktemp("rpc")
    port = free_port()
    worker = Process.start([str(tools_dir() / "rpc-server"), "-H", "127.0.0.1", "-p", str(port),
                            "-t", str(physical_cores())], folder / "rpc-server.log")
    try:
        deadline = time.monotonic() + START_LIMIT
        while not listening(port):
            if worker.popen.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"rpc-server did not start:\n{worker.tail()}")
            time.sleep(0.1)
        # Flash attention off, as in-process on an f16 cache: replies are compared below.
        server = start_llama_server(default_model_path, folder, "--rpc", f"127.0.0.1:{port}", "-ngl", "99",
                                    "-fa", "off")
    except BaseException:
        worker.stop()
        raise
    yield worker, server
    server.stop()
    worker.stop()


def listening(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


def test_a_chat_turn_runs_on_the_rpc_worker(rpc_cluster, chatapp_run):
    worker, server = rpc_cluster
    args = ("ask", "Name a fruit.", "Name another one.", "--json", "--temperature", "0", "--max-tokens", "24")
    before = psutil.Process(worker.popen.pid).cpu_times()
    out = chatapp_run(*args, "--server", server.url)
    after = psutil.Process(worker.popen.pid).cpu_times()
    assert out.returncode == 0, out.stderr
    first, second = (json.loads(line) for line in out.stdout.splitlines())
    assert first["backend"] == "llama-server" and first["server"] == server.url
    assert second["cached_tokens"] > 0
    # The layers live on the worker: it did the maths of both turns.
    assert after.user + after.system > before.user + before.system
    # And the maths is the same as in-process (the worker runs the same CPU kernels).
    local = chatapp_run(*args, "--ctx", "1024")
    assert local.returncode == 0, local.stderr
    assert [first["reply"], second["reply"]] == [json.loads(line)["reply"] for line in local.stdout.splitlines()]

