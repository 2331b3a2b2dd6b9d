"""How many threads llama.cpp gets: measured, and fewer while other programs are busy."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from chatapp.config import Settings
from chatapp.engine.opening import open_engine
from chatapp.engine.machine.hardware import physical_cores
from chatapp.engine.local.threads import RECHECK_S, OtherLoad, ThreadPolicy, cached_choice

BUSY = [sys.executable, "-c", "import time\nend = time.time() + 60\nwhile time.time() < end: pass"]


class Load:
    """What other programs use, as a test sets it: the policy's rules without a busy machine."""

    def __init__(self, cores: float = 0.0) -> None:
        self.cores = cores

    def sample(self) -> float:
        return self.cores


@pytest.fixture
def busy_process():
    proc = subprocess.Popen(BUSY)
    time.sleep(0.3)
    yield proc
    proc.kill()
    proc.wait()


def test_other_load_sees_a_busy_process(busy_process):
    load = OtherLoad()
    time.sleep(1.0)
    assert load.sample() >= 0.6


def test_a_busy_machine_leaves_fewer_threads():
    load = Load()
    policy = ThreadPolicy(4, load=load)
    policy.look(force=True)
    assert policy.prefill_threads() == 4
    load.cores = 1.3
    policy.look(force=True)
    assert policy.free == 3 and policy.prefill_threads() == 3 and policy.decode_threads() <= 3
    assert "other programs keep 1 of 4 cores busy" in policy.reason(3)
    load.cores = 3.9
    policy.look(force=True)
    assert policy.decode_threads() == policy.prefill_threads() == 1


def test_the_first_steps_measure_and_the_fastest_count_is_kept():
    policy = ThreadPolicy(2, load=Load(), key="test-machine|model")
    assert policy.measuring and "measuring" in policy.reason(policy.decode_threads())
    tried = []
    while policy.measuring:
        threads = policy.decode_threads()
        tried.append(threads)
        policy.observe(threads, 0.010 if threads == 1 else 0.016)  # here 1 thread is faster
    assert set(tried) == {1, 2}
    assert policy.best == 1 and policy.decode_threads() == 1
    assert "fastest measured here" in policy.reason(1) and "1: 10.0 ms" in policy.reason(1)
    assert cached_choice("test-machine|model") == 1
    again = ThreadPolicy(2, load=Load(), key="test-machine|model")
    assert not again.measuring and again.decode_threads() == 1


def measured_fastest(cores: int, fast: int, load: Load, now: list[float]) -> ThreadPolicy:
    """A policy whose first measurement, on a quiet machine, found `fast` threads fastest."""
    policy = ThreadPolicy(cores, load=load, clock=lambda: now[0])
    while policy.measuring:
        threads = policy.decode_threads()
        policy.observe(threads, 0.010 if threads == fast else 0.016)
    return policy


def finish_trial(policy: ThreadPolicy, step_s: dict[int, float]) -> set[int]:
    tried = set()
    while policy.measuring:
        threads = policy.decode_threads()
        tried.add(threads)
        policy.observe(threads, step_s[threads])
    return tried


def test_under_part_of_a_core_of_load_both_counts_are_timed_and_the_faster_kept():
    load, now = Load(), [0.0]
    policy = measured_fastest(2, 2, load, now)
    load.cores = 0.6  # e.g. the terminal drawing chatapp: more than half a core, less than a whole one
    policy.look(force=True)
    assert policy.measuring and "measuring 1 and 2 threads under the load" in policy.reason(policy.decode_threads())
    assert finish_trial(policy, {1: 0.015, 2: 0.012}) == {1, 2}
    assert policy.decode_threads() == 2
    assert "fastest measured under the load here" in policy.reason(2) and "2: 12.0 ms" in policy.reason(2)
    now[0] += 5
    policy.look(force=True)
    assert not policy.measuring and policy.decode_threads() == 2  # the same load: kept
    now[0] += RECHECK_S
    policy.look(force=True)
    assert policy.measuring  # measured again after a while
    finish_trial(policy, {1: 0.011, 2: 0.016})
    assert policy.decode_threads() == 1


def test_a_count_that_waits_on_the_load_is_given_up_after_one_slow_step():
    load, now = Load(), [0.0]
    policy = measured_fastest(2, 2, load, now)
    load.cores = 0.8
    policy.look(force=True)
    steps = []
    while policy.measuring:
        threads = policy.decode_threads()
        steps.append(threads)
        policy.observe(threads, 0.010 if threads == 1 else 1.0)
    assert steps.count(2) == 1 and policy.decode_threads() == 1


def test_a_whole_busy_core_is_taken_without_measuring():
    load, now = Load(), [0.0]
    policy = measured_fastest(2, 2, load, now)
    load.cores = 1.0
    policy.look(force=True)
    assert not policy.measuring and policy.decode_threads() == 1
    assert "other programs keep 1 of 2 cores busy" in policy.reason(1)


def test_threads_set_in_the_config_are_used_as_they_are():
    policy = ThreadPolicy(2, fixed=1, load=Load(3.0))
    policy.look(force=True)
    assert policy.decode_threads() == policy.prefill_threads() == 1
    assert policy.reason(1) == "set in the config"


def test_a_turn_on_a_busy_machine_decodes_with_fewer_threads(default_model_path, busy_process):
    cores = physical_cores()
    if cores < 2:
        pytest.fail("this test needs at least 2 physical cores to show the back-off")
    engine = open_engine(Settings(n_ctx=512, temperature=0.0, max_tokens=24), str(default_model_path))
    try:
        time.sleep(0.6)  # the policy looks at the machine's load at least twice a second
        record = list(engine.send("Count to ten."))[-1].record
    finally:
        engine.close()
    assert record.extra["threads"] <= cores - 1
    assert record.extra["threads_batch"] <= cores - 1
    assert "other programs keep" in record.extra["threads_reason"]
