"""Snapshots of the main screen in every shipped theme.

The scripted backend (tests/ui/scripted.py) stands in for llama.cpp here, because a
snapshot needs the same text and figures on every run; the clock is scripted for the
same reason. Everything else (engine, chat, panels, themes) is the real code.
"""

import itertools

import pytest

from tests.ui._helpers import SHIPPED_THEMES, fixed_ids, scripted_app, wait_until


@pytest.fixture
def scripted_clock(monkeypatch):
    ticks = itertools.count()
    monkeypatch.setattr("chatapp.engine.chat.engine.time.perf_counter", lambda: next(ticks) * 0.004)
    fixed_ids(monkeypatch)  # the transcript shows each message's id


async def send_one_turn(pilot):
    app = pilot.app
    for widget in app.query("TextArea"):
        widget.cursor_blink = False
    await pilot.press(*"How does inference work?")
    await pilot.press("enter")
    await wait_until(pilot, lambda: app.engine.messages[-1].role == "assistant", timeout=10)
    await pilot.app.workers.wait_for_complete()
    await pilot.pause()


@pytest.mark.parametrize("theme", SHIPPED_THEMES)
def test_main_screen_wide(snap_compare, default_model_path, scripted_clock, theme):
    assert snap_compare(scripted_app(default_model_path, theme), run_before=send_one_turn, terminal_size=(140, 44))


def test_main_screen_80x24(snap_compare, default_model_path, scripted_clock):
    assert snap_compare(scripted_app(default_model_path, "chatapp-dark"), run_before=send_one_turn,
                        terminal_size=(80, 24))


async def regenerate_and_select(pilot):
    """A reply regenerated (‹ 2/2 ›: the first one is kept in the tree) and selected."""
    app = pilot.app
    await send_one_turn(pilot)
    await pilot.press("ctrl+r")
    await wait_until(pilot, lambda: not app.generating, timeout=10)
    await app.workers.wait_for_complete()
    await pilot.press("alt+up")
    app.clear_notifications()
    await pilot.pause()


def test_branches_in_the_transcript(snap_compare, default_model_path, scripted_clock):
    assert snap_compare(scripted_app(default_model_path, "chatapp-dark"), run_before=regenerate_and_select,
                        terminal_size=(140, 44))


def test_tree_screen(snap_compare, default_model_path, scripted_clock):
    """After a regenerate and an edit of the question: two forks, three leaves."""

    async def open_tree(pilot):
        app = pilot.app
        await regenerate_and_select(pilot)
        await pilot.press("alt+up", "alt+e")
        app.query_one("Composer").load_text("And how does decode work?")
        await pilot.press("enter")
        await wait_until(pilot, lambda: not app.generating, timeout=10)
        await app.workers.wait_for_complete()
        await pilot.press("alt+t")
        await wait_until(pilot, lambda: type(app.screen).__name__ == "TreeScreen", timeout=10)
        app.clear_notifications()
        await pilot.pause()

    assert snap_compare(scripted_app(default_model_path, "chatapp-dark"), run_before=open_tree,
                        terminal_size=(140, 44))
