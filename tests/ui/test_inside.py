"""Inside the model, in the TUI: the Anatomy screen (F7) and a selected token's neighbours, driven
through Textual's pilot against the real default model; snapshots of the screen in every theme."""

from __future__ import annotations

import os
import shutil

import pytest
from textual.command import CommandPalette

from chatapp.config import Settings
from chatapp.engine.opening import open_engine
from chatapp.ui.app import ChatApp
from chatapp.ui.controllers.inside import NeighboursFound
from chatapp.ui.screens.anatomy import AnatomyScreen, AnatomyView
from chatapp.ui.widgets.composer import Composer
from chatapp.ui.widgets.tokens_panel import TokensPanel

from tests.ui._helpers import Messages, wait_until
from tests.gguf_copy import write_absurd_header

from tests.ui._helpers import SHIPPED_THEMES, scripted_app

pytestmark = pytest.mark.app_settings(n_ctx=512, max_tokens=8, threads=0, opener=None)

WIDE = (140, 44)
WEEKDAYS = {"Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"}


async def anatomy_shown(pilot) -> AnatomyView:
    await wait_until(pilot, lambda: isinstance(pilot.app.screen, AnatomyScreen), 5)
    view = pilot.app.screen.query_one(AnatomyView)
    await wait_until(pilot, lambda: view.anatomy is not None, 10)
    await pilot.pause()
    return view


async def test_f7_shows_the_loaded_models_anatomy(app):
    async with app.run_test(size=WIDE) as pilot:
        await pilot.press("f7")  # the composer has focus, and binds F7 itself
        view = await anatomy_shown(pilot)
        text = view.plain
        for expected in ("Smollm2 135M", "9 query, 3 key/value", "GQA ratio", "tied to the embedding",
                         "2 × 30 × 3 × 64 = 11,520", "23,040 B", "Tensor families, by bytes", "Blocks, by bytes"):
            assert expected in text, expected
        assert sum(line.endswith("█ 2.11 MiB") for line in text.splitlines()) == 30  # one bar per block
        await pilot.press("f7")
        await wait_until(pilot, lambda: not isinstance(app.screen, AnatomyScreen), 5)
        await pilot.press("f7")
        await anatomy_shown(pilot)
        await pilot.press("escape")
        await wait_until(pilot, lambda: not isinstance(app.screen, AnatomyScreen), 5)


async def test_f7_on_an_absurd_header_says_it_is_inconsistent_and_closes(default_model_path, tmp_path):
    """The loaded model's file replaced on disk by a header claiming 10^9 blocks, negative heads
    and a 10 MB name (llama.cpp keeps the file it mapped): the screen says the header is
    inconsistent instead of showing it, and F7 closes it (the worker building 10^9-long lists
    held the interpreter, so no key was handled)."""
    copy = tmp_path / "model.gguf"
    shutil.copyfile(default_model_path, copy)
    settings = Settings(n_ctx=512, temperature=0.0, max_tokens=8)
    chat_app = ChatApp(open_engine(settings, str(copy)), settings=settings)
    try:
        async with chat_app.run_test(size=WIDE) as pilot:
            os.replace(write_absurd_header(tmp_path / "absurd.gguf"), copy)
            await pilot.press("f7")
            await wait_until(pilot, lambda: isinstance(chat_app.screen, AnatomyScreen), 5)
            view = chat_app.screen.query_one(AnatomyView)
            await wait_until(pilot, lambda: view.problem is not None, 30)
            assert "the header is inconsistent" in view.problem and "1,000,000,000" in view.problem
            assert view.anatomy is None and len(view.problem) < 1000
            await pilot.press("f7")
            await wait_until(pilot, lambda: not isinstance(chat_app.screen, AnatomyScreen), 5)
    finally:
        chat_app.release_engine()


async def test_the_palette_opens_the_anatomy(app):
    async with app.run_test(size=WIDE) as pilot:
        await pilot.press("ctrl+p")
        assert isinstance(app.screen, CommandPalette)
        await pilot.press(*"model anatomy")
        await pilot.pause(0.5)
        await pilot.press("enter")
        assert "KV cache per token" in (await anatomy_shown(pilot)).plain


async def test_a_selected_tokens_neighbours_come_from_a_worker(app):
    seen = Messages()
    async with app.run_test(size=WIDE, message_hook=seen) as pilot:
        panel = app.query_one(TokensPanel)
        app.query_one(Composer).load_text("Monday 7")
        await wait_until(pilot, lambda: [t.piece for t in panel.composer_tokens] == ["Monday", " ", "7"], 10)
        panel.focus()
        await pilot.press("right")  # nothing selected yet: the first token
        assert panel.selected == 0 and panel.has_class("-selecting")
        await wait_until(pilot, lambda: seen.count(NeighboursFound) == 1, 30)
        await pilot.pause()
        _, found, problem = panel.neighbours
        assert problem is None and len(found) == 10
        assert len({n.piece.strip() for n in found[:5]} & WEEKDAYS) >= 3, found
        shown = panel.query_one("#tokens-neighbours").plain
        assert "nearest to 'Monday'" in shown and "Tuesday" in shown

        await pilot.press("right", "right")
        assert panel.selected_token.piece == "7"
        await wait_until(pilot, lambda: panel.neighbours[1] is not None and panel.neighbours[0] == 39, 30)
        assert sum(n.piece.isdigit() for n in panel.neighbours[1][:5]) >= 4

        await pilot.click("#tokens-pieces", offset=(1, 0))  # on "Monday" again
        assert panel.selected == 0
        await wait_until(pilot, lambda: panel.neighbours[1] is not None and panel.neighbours[0] == 32210, 30)

        app.query_one(Composer).load_text("Something else")  # new tokens: the selection goes
        await wait_until(pilot, lambda: panel.composer_tokens and panel.composer_tokens[0].piece == "Something", 10)
        assert panel.selected is None and not panel.has_class("-selecting")


@pytest.mark.parametrize("theme", SHIPPED_THEMES)
def test_anatomy_screen(snap_compare, default_model_path, theme):
    """The screen needs only a GGUF path, and the real default model's header is the same on every
    run; the scripted runtime keeps the rest of the app still behind it."""

    async def open_anatomy(pilot):
        for widget in pilot.app.query("TextArea"):
            widget.cursor_blink = False
        await pilot.press("f7")
        await anatomy_shown(pilot)

    assert snap_compare(scripted_app(default_model_path, theme), run_before=open_anatomy, terminal_size=(120, 44))
