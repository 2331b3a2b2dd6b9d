"""A new machine's first turn waits for no one-off measurement (issue 36): the memory-bandwidth
probe runs after the reply, and the turn says so; on the real default model, in a fresh cache
folder (every test gets one). Order and structure only: no test here times anything."""

from __future__ import annotations

from chatapp import paths
from chatapp.engine.events import TextDelta, TurnDone
from chatapp.engine.machine import bandwidth
from tests.engine.conftest import make_engine


def probed() -> bool:
    """Whether the probe ran: it writes its figure to the cache as soon as it has one."""
    return (paths.cache_dir() / bandwidth.CACHE_FILE).exists()


def test_the_first_token_comes_before_the_bandwidth_probe_and_the_next_turn_has_its_figure(runtime):
    engine = make_engine(runtime)
    assert not probed()
    turn = engine.send("Name a colour.")
    first = next(e for e in turn if isinstance(e, TextDelta))
    assert not probed(), "the probe ran before the first token"
    assert first.live.bandwidth_gbps is None and first.live.bandwidth_note == bandwidth.MEASURING
    done = [e for e in turn if isinstance(e, TurnDone)]
    assert probed()  # after the reply, before the turn's generator ended
    extra = done[0].record.extra
    assert extra["memory_bandwidth_gbps"] is None and extra["memory_bandwidth_note"] == bandwidth.MEASURING

    second = list(engine.send("Another one."))
    live = next(e for e in second if isinstance(e, TextDelta)).live
    assert live.bandwidth_gbps is not None and live.bandwidth_gbps > 0 and live.bandwidth_note == ""
    extra = second[-1].record.extra
    assert extra["memory_bandwidth_gbps"] > 0 and "memory_bandwidth_note" not in extra


def test_a_machine_measured_before_has_the_figure_from_the_first_token(runtime):
    measured = bandwidth.memory_bandwidth(runtime.threads[0])  # an earlier process's probe, cached
    engine = make_engine(runtime)
    first = next(e for e in engine.send("Name a colour.") if isinstance(e, TextDelta))
    assert first.live.bandwidth_gbps == measured.gbps and first.live.bandwidth_note == ""
