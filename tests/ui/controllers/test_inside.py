"""The inside controller (chatapp.ui.controllers.inside) on a small host App, on the real default
model: a selected token's neighbours, looked up on a worker (the app's side, with the Tokens
panel, the Anatomy and the attention view: tests/ui/test_inside.py, tests/ui/test_attention.py)."""

from __future__ import annotations

from pathlib import Path

from chatapp.ui.controllers.inside import NEIGHBOURS_SHOWN, InsideController, NeighboursFound
from tests.ui._helpers import Messages, wait_until

WEEKDAYS = {"Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"}
MONDAY = 32210
"""The default model's token for "Monday"."""


async def test_a_selected_tokens_neighbours_are_looked_up_on_a_worker_and_set_on_the_host(make_host):
    host, seen = make_host(InsideController), Messages()
    assert host.engine.describe([MONDAY])[0].piece == "Monday"
    async with host.run_test(message_hook=seen) as pilot:
        host.controller.token_selected(MONDAY)
        assert host.neighbours == (MONDAY, None, None)  # at once: being looked up
        await wait_until(pilot, lambda: seen.count(NeighboursFound) == 1, 60)
        await pilot.pause()
        token_id, found, problem = host.neighbours
        assert token_id == MONDAY and problem is None and len(found) == NEIGHBOURS_SHOWN
        assert len({n.piece.strip() for n in found[:5]} & WEEKDAYS) >= 3, found

        # A lookup in a model that has since been replaced is dropped.
        host.controller.found(NeighboursFound(Path("/elsewhere/other.gguf"), 7, [], None))
        assert host.neighbours == (MONDAY, found, None)
