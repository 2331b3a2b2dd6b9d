"""`chatapp bench bandwidth`."""

from __future__ import annotations

import json

from chatapp import paths
from chatapp.engine.machine import bandwidth
from chatapp.errors import InputError


def test_bandwidth_measures_prints_and_caches(invoke):
    result = invoke("bench", "bandwidth", "--threads", "1")
    assert result.exit_code == 0, result.output
    assert result.output.startswith("memory read bandwidth: ") and "1 threads reading" in result.output
    cached = bandwidth.cached(1)
    assert cached is not None and f"{cached.gbps:.1f} GB/s" in result.output
    again = json.loads(invoke("bench", "bandwidth", "--threads", "1", "--json").output)
    assert again["threads"] == 1 and not again["cached"] and again["gpu"] is None
    stored = json.loads((paths.cache_dir() / bandwidth.CACHE_FILE).read_text())
    assert stored["machines"][bandwidth.machine_key()]["1"]["gbps"] == again["gbps"]


def test_bandwidth_rejects_zero_threads(invoke):
    result = invoke("bench", "bandwidth", "--threads", "0")
    assert result.exit_code == 2 and result.stderr.startswith(f"chatapp: {InputError.title}: ")


def test_bad_threads_are_one_line_with_exit_2(chatapp_exe):
    result = chatapp_exe("bench", "bandwidth", "--threads", "0")
    assert result.returncode == 2
    assert result.stderr.strip() == "chatapp: Input: --threads must be at least 1, got 0"
