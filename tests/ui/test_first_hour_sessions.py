"""Every chat is kept: a plain chat becomes a session at its first turn, named after its first
question; Ctrl+N, a fork and quitting lose nothing; the lists show each chat's first line, newest
first; and a user who wants nothing kept says so (incognito), which the header shows."""

from __future__ import annotations

import pytest
from textual.widgets import DataTable, Input

from chatapp.config import Settings
from chatapp.engine.sessions import SessionManager
from chatapp.ui.messages import SessionOpened
from chatapp.ui.screens.sessions import COLUMNS, NameScreen, SessionsScreen
from chatapp.ui.widgets.header import AppHeader
from tests.ui._helpers import TURN_TIMEOUT, next_of, send, wait_until

WIDE = (160, 48)


def store() -> SessionManager:
    return SessionManager.open(Settings(), create=False)


def header(app) -> str:
    return app.query_one(AppHeader).render().plain


def user_texts(name: str) -> list[str]:
    return [m.content for m in store().store.load(name).tree if m.role == "user"]


async def test_a_plain_chat_is_kept_from_its_first_turn_and_ctrl_n_starts_another(make_app):
    app, seen = make_app()
    async with app.run_test(size=WIDE, message_hook=seen) as pilot:
        assert "session: new" in header(app)
        await send(pilot, "Name a colour.", seen)
        kept = await next_of(pilot, seen, SessionOpened, 0)
        assert kept.kept and app.sessions_ui.name == "Name a colour"
        assert "session: Name a colour" in header(app)
        await send(pilot, "And a fruit?", seen)
        assert user_texts("Name a colour") == ["Name a colour.", "And a fruit?"]  # saved after every turn

        await pilot.press("ctrl+n")
        await pilot.pause()
        assert app.sessions_ui.live is None and "session: new" in header(app)
        await send(pilot, "Name a colour.", seen)  # the same first question: a name of its own
        await next_of(pilot, seen, SessionOpened, 1)
        assert app.sessions_ui.name == "Name a colour 2"
        summaries = store().store.summaries()
        assert [s.name for s in summaries] == ["Name a colour 2", "Name a colour"]  # newest first
        assert [s.first_line for s in summaries] == ["Name a colour.", "Name a colour."]

        await pilot.press("f6")  # the list shows each chat's first question
        await wait_until(pilot, lambda: isinstance(app.screen, SessionsScreen))
        table = app.screen.query_one(DataTable)
        rows = [table.get_row_at(i) for i in range(table.row_count)]
        assert [str(row[1]) for row in rows] == ["Name a colour.", "Name a colour."]  # cells are Text
        await pilot.press("escape")


async def test_a_fork_leaves_the_kept_chat_whole_and_quitting_keeps_the_last_turn(make_app):
    app, seen = make_app()
    async with app.run_test(size=WIDE, message_hook=seen) as pilot:
        await send(pilot, "Name a colour.", seen)
        await send(pilot, "Name a fruit.", seen)
        await pilot.press("ctrl+r")  # a second reply: the chat has two branches now
        await wait_until(pilot, lambda: not app.generating, TURN_TIMEOUT)
        await pilot.pause()
        original = app.sessions_ui.name
        await pilot.press("alt+n")
        await wait_until(pilot, lambda: isinstance(app.screen, NameScreen))
        app.screen.query_one(Input).value = "side"
        await pilot.press("enter")
        await next_of(pilot, seen, SessionOpened, 1)
        assert app.sessions_ui.name == "side"
        whole = [m for m in store().store.load(original).tree if m.role != "system"]
        assert len(whole) == 5  # both replies of the second question are still in the original
        assert {s.name for s in store().store.summaries()} == {original, "side"}
    app.release_engine()
    assert user_texts("side") == ["Name a colour.", "Name a fruit."]


async def test_incognito_keeps_nothing_and_says_so(make_app):
    app, seen = make_app(incognito=True)
    async with app.run_test(size=WIDE, message_hook=seen) as pilot:
        assert "incognito" in header(app)
        await send(pilot, "Name a colour.", seen)
        await pilot.pause()
        assert app.sessions_ui.live is None and not seen.of(SessionOpened)
        assert "incognito" in header(app)
    app.release_engine()
    assert store().store.summaries() == []


LONG_QUESTION = ("Tell me, in a few sentences and without any lists, why the sky looks blue at noon and red "
                 "at sunset, and what that says about the size of the particles in the air?")


@pytest.mark.parametrize("size, columns", [((160, 48), COLUMNS), ((80, 24), tuple(c for c in COLUMNS if c != "model"))],
                         ids=["160x48", "80x24"])
async def test_the_sessions_dialog_shows_every_column_without_a_sideways_scroll(make_app, size, columns):
    """Issue 59: at 160 columns a long first question pushed turns, tokens, state and last use
    behind a horizontal scroll. Now the figures keep their width and the text columns wrap; at
    80 the model is left out (the header and `sessions list` show it)."""
    app, seen = make_app()
    async with app.run_test(size=size, message_hook=seen) as pilot:
        await send(pilot, LONG_QUESTION, seen)
        await next_of(pilot, seen, SessionOpened, 0)
        await pilot.press("f6")
        await wait_until(pilot, lambda: isinstance(app.screen, SessionsScreen))
        await pilot.pause()
        table = app.screen.query_one(DataTable)
        assert tuple(str(column.label) for column in table.ordered_columns) == columns
        assert table.max_scroll_x == 0, (table.virtual_size, table.size)
        question = next(i for i, c in enumerate(table.ordered_columns) if str(c.label) == "first question")
        shown = str(table.get_row_at(0)[question])  # the kept first line, wrapped in its column
        assert LONG_QUESTION.startswith(shown.rstrip("…")) and len(shown) > table.ordered_columns[question].width
        assert table.ordered_rows[0].height > 1
        await pilot.press("escape")
