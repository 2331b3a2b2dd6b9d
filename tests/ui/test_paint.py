"""The bars the panels draw (chatapp.ui.widgets.paint): cells in proportion, and a segment too
small for a cell of its own drawn as less than one (issue 59)."""

from __future__ import annotations

from rich.style import Style

from chatapp.ui.widgets.paint import UNDER_ONE_CELL, stacked_bar

ROLES = [Style(color=c) for c in ("red", "green", "blue", "yellow")]
FREE = Style(color="white")


def test_segments_under_one_cell_show_as_less_than_a_cell():
    """75 of 4,096 cells in four roles at 67 cells: 1.2 cells' worth. The one the rounding gives
    a cell is a block; the other three show, as half blocks, not as three more cells' share."""
    bar = stacked_bar([(size, style) for size, style in zip((30, 20, 15, 10), ROLES)], 4096, 67, FREE).plain
    assert bar == "█" + UNDER_ONE_CELL * 3 + "░" * 63


def test_a_bar_in_proportion_has_no_half_cells():
    bar = stacked_bar([(size, style) for size, style in zip((1024, 512, 256, 256), ROLES)], 4096, 64, FREE).plain
    assert bar == "█" * 16 + "█" * 8 + "█" * 4 + "█" * 4 + "░" * 32 and UNDER_ONE_CELL not in bar
    assert stacked_bar([], 0, 5, FREE).plain == "░" * 5
