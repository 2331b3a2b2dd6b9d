"""A new machine's first turn waits for no one-off measurement (issue 36): the memory-bandwidth
probe runs after the reply, and the turn says so; on the real default model, in a fresh cache
folder (every test gets one). Order and structure only: no test here times anything."""

from __future__ import annotations

import pytest

import threading

from chatapp import paths
from chatapp.engine.events import TextDelta, TurnDone
from chatapp.engine.machine import bandwidth
from tests.engine.conftest import make_engine


def probed() -> bool:
    """Whether the probe ran: it writes its figure to the cache as soon as it has one."""
    return (paths.cache_dir() / bandwidth.CACHE_FILE).exists()


@pytest.mark.unmeasured_machine  # a first run: the machine is not measured yet
def test_the_first_token_comes_before_the_bandwidth_probe_and_the_next_turn_has_its_figure(runtime):
    engine = make_engine(runtime)
    assert not probed()
    turn = engine.send("Name a colour.")
    first = next(e for e in turn if isinstance(e, TextDelta))
    assert not probed(), "the probe ran before the first token"
    assert first.live.bandwidth_gbps is None and first.live.bandwidth_note == bandwidth.MEASURING
    done = [e for e in turn if isinstance(e, TurnDone)]
    extra = done[0].record.extra
    assert extra["memory_bandwidth_gbps"] is None and extra["memory_bandwidth_note"] == bandwidth.MEASURING

    second = list(engine.send("Another one."))
    live = next(e for e in second if isinstance(e, TextDelta)).live
    assert live.bandwidth_gbps is not None and live.bandwidth_gbps > 0 and live.bandwidth_note == ""
    extra = second[-1].record.extra
    assert extra["memory_bandwidth_gbps"] > 0 and "memory_bandwidth_note" not in extra


@pytest.mark.unmeasured_machine  # a first run: the machine is not measured yet
def test_the_turn_ends_without_waiting_for_the_probe_and_the_next_turn_waits_for_it(runtime, monkeypatch):
    """A tool call's approval dialog comes at the turn's end: the probe must not hold it back.
    The probe here waits until the test has seen the TurnDone (at most 30 s): run inside the
    turn, it would end after it."""
    order, seen_done = [], threading.Event()
    real = bandwidth.memory_bandwidth

    def probe(threads):
        order.append(("probe starts", threading.current_thread().name))
        seen_done.wait(30)
        order.append(("probe ends", None))
        return real(threads)

    monkeypatch.setattr(bandwidth, "memory_bandwidth", probe)
    engine = make_engine(runtime)
    for event in engine.send("Name a colour."):
        if isinstance(event, TurnDone):
            order.append(("turn done", None))
            seen_done.set()
    second = engine.send("Another one.")
    first = next(e for e in second if isinstance(e, TextDelta))  # the next turn waited for the probe
    assert order.index(("turn done", None)) < order.index(("probe ends", None)), order
    assert ("probe starts", "chatapp-bandwidth-probe") in order
    assert first.live.bandwidth_gbps is not None and probed()
    list(second)


def test_a_machine_measured_before_has_the_figure_from_the_first_token(runtime):
    measured = bandwidth.memory_bandwidth(runtime.threads[0])  # an earlier process's probe, cached
    engine = make_engine(runtime)
    first = next(e for e in engine.send("Name a colour.") if isinstance(e, TextDelta))
    assert first.live.bandwidth_gbps == measured.gbps and first.live.bandwidth_note == ""
