"""The reply pacer: updates spaced by what they cost the UI thread."""

from __future__ import annotations

from chatapp.ui.pacing import UpdatePacer


class Clocks:
    def __init__(self) -> None:
        self.wall = self.cpu = 0.0


def pacer(budget: float = 0.25) -> tuple[UpdatePacer, Clocks]:
    clocks = Clocks()
    return UpdatePacer(budget, clock=lambda: clocks.wall, cpu_clock=lambda: clocks.cpu), clocks


def test_the_first_update_is_due_at_once():
    first, _ = pacer()
    assert first.due()


def test_the_next_update_waits_for_the_cpu_the_last_one_cost_over_the_budget():
    paced, clocks = pacer(0.25)
    paced.mark()
    clocks.cpu += 0.05  # that update (and its layout) took 50 ms of the UI thread
    clocks.wall += 0.1
    assert not paced.due()  # 50 ms at 25% needs 200 ms
    clocks.wall += 0.1
    assert paced.due()


def test_cheap_updates_are_never_held_back():
    paced, clocks = pacer(0.25)
    paced.mark()
    clocks.wall += 0.01
    assert paced.due()


def test_reset_starts_a_new_turn_with_an_update_due():
    paced, clocks = pacer(0.25)
    paced.mark()
    clocks.cpu += 1.0
    assert not paced.due()
    paced.reset()
    assert paced.due()
