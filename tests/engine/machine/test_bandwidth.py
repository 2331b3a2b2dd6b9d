"""The memory-bandwidth probe and its per-machine cache. No test asserts a speed: the machine
is shared; benchmarks/speculative.py compares the probe with a numpy copy."""

from __future__ import annotations

import pytest

import json

from chatapp import paths
from chatapp.engine.machine import bandwidth


def test_a_probe_reads_a_buffer_larger_than_the_caches():
    result = bandwidth.measure(threads=2)
    assert result.gbps > 0 and result.threads == 2 and not result.cached
    assert result.buffer_bytes >= min(bandwidth.MIN_BUFFER, bandwidth.buffer_size())
    assert result.buffer_bytes >= 2 * bandwidth.last_level_cache_bytes() or result.buffer_bytes >= bandwidth.MAX_BUFFER
    assert bandwidth.PASSES >= result.passes >= 2


@pytest.mark.unmeasured_machine  # a first run: the machine is not measured yet
def test_the_figure_is_cached_per_machine_and_thread_count():
    first = bandwidth.memory_bandwidth(1)
    again = bandwidth.memory_bandwidth(1)
    assert again.cached and again.gbps == first.gbps
    stored = json.loads((paths.cache_dir() / bandwidth.CACHE_FILE).read_text())
    assert set(stored["machines"]) == {bandwidth.machine_key()}
    assert bandwidth.cached(2) is None  # another thread count is another figure
    fresh = bandwidth.memory_bandwidth(1, refresh=True)
    assert not fresh.cached
    assert bandwidth.memory_bandwidth(1).gbps == fresh.gbps


def test_a_damaged_cache_means_measuring_again():
    path = paths.cache_dir() / bandwidth.CACHE_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    for junk in ("{not json", json.dumps({"format": 1, "machines": {bandwidth.machine_key(): {"1": {"gbps": "x"}}}})):
        path.write_text(junk)
        assert not bandwidth.memory_bandwidth(1).cached


def test_gpu_backends_are_not_measured():
    assert bandwidth.bandwidth_for("CUDA") is None
    assert bandwidth.bandwidth_for("CPU", threads=1).gbps > 0


def test_machine_key_names_cpu_cores_and_memory():
    cpu, cpus, cores, memory = bandwidth.machine_key().split("|")
    assert cpu and cpus.endswith(" cpus") and cores.endswith(" cores") and memory.endswith(" bytes")


def test_cache_sizes_parse():
    assert bandwidth._size("32768K\n") == 32 << 20
    assert bandwidth._size("2M") == 2 << 20
    assert bandwidth.last_level_cache_bytes() > 0
