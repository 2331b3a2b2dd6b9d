"""Search in the TUI (/ in the sessions list, F6): a word on a branch not shown, typed into the
search box, opens its session on that branch with the branch's kept KV state and the message
selected (in the chat already open, a switch to that branch); a query FTS5 can't read is said
under the box. Real default model."""

from __future__ import annotations

import pytest
from textual.widgets import Input, OptionList, Static

from chatapp.ui.screens.search import SearchScreen
from chatapp.ui.screens.sessions import SessionsScreen
from chatapp.ui.widgets.transcript import Transcript
from tests.ui._helpers import TURN_TIMEOUT, WIDE, opened, send_text, wait_until

pytestmark = pytest.mark.app_settings(max_tokens=12, threads=0, opener=None)


async def search_box(pilot, query: str) -> SearchScreen:
    await pilot.press("f6")
    await wait_until(pilot, lambda: isinstance(pilot.app.screen, SessionsScreen), TURN_TIMEOUT)
    await pilot.press("slash")
    await wait_until(pilot, lambda: isinstance(pilot.app.screen, SearchScreen))
    screen = pilot.app.screen
    screen.query_one(Input).value = query  # as typed: each change searches
    await pilot.pause()
    return screen


async def test_a_hit_on_a_branch_not_shown_opens_that_branch_with_its_state_and_selects_it(make_app):
    app, seen = make_app(session="trip")
    async with app.run_test(size=WIDE, message_hook=seen) as pilot:
        await opened(pilot, seen)
        await send_text(pilot, app, seen, "Say hello.")
        await send_text(pilot, app, seen, "Is the quokkaberry a fruit?")
        hidden = app.engine.leaf
        question = app.engine.messages[-2].id
        transcript = app.query_one(Transcript)
        transcript.select(None)
        await pilot.press("alt+up", "alt+up", "alt+up")  # the first reply
        await pilot.press("alt+c")
        await send_text(pilot, app, seen, "Name a colour like vermilion.")
        shown = app.engine.leaf
        assert shown != hidden
    app.release_engine()

    again, seen = make_app()  # a new chat: the hit is in another session
    async with again.run_test(size=WIDE, message_hook=seen) as pilot:
        screen = await search_box(pilot, "quokkaberry")
        assert screen.hits and {h.leaf for h in screen.hits} == {hidden}
        listed = screen.query_one(OptionList)
        assert listed.option_count == len(screen.hits)
        user_hit = next(i for i, h in enumerate(screen.hits) if h.message_id == question)
        await pilot.press("enter")  # from the box into the list
        listed.highlighted = user_hit
        await pilot.press("enter")
        report = (await opened(pilot, seen)).live.report
        assert again.session_name == "trip" and again.engine.leaf == hidden
        assert report.restored_tokens > 0, report.fallback
        assert again.selection() is not None and again.selection().message_id == question
        record = (await send_text(pilot, again, seen, "And its colour?")).record
        assert record.prefill_tokens < 30 < record.prompt_tokens
        vermilion = await search_box(pilot, "vermilion")  # now in the open chat, on the branch left: a switch
        asked = next(h.message_id for h in vermilion.hits if h.role == "user")
        await pilot.press("enter")  # from the box into the list
        vermilion.query_one(OptionList).highlighted = next(i for i, h in enumerate(vermilion.hits)
                                                           if h.message_id == asked)
        await pilot.press("enter")
        await wait_until(pilot, lambda: again.engine.leaf == shown, TURN_TIMEOUT)
        assert again.session_name == "trip"
        # and the hit's message selected there (issue 56), as a hit in another session is
        await wait_until(pilot, lambda: again.selection() is not None and again.selection().message_id == asked,
                         TURN_TIMEOUT)
        shown_question = next(m.id for m in again.engine.messages if m.role == "user"
                              and "quokkaberry" not in m.content and "vermilion" not in m.content)
        hello = await search_box(pilot, "hello")  # on the branch shown: no switch, the message selected
        await pilot.press("enter")
        hello.query_one(OptionList).highlighted = next(i for i, h in enumerate(hello.hits)
                                                       if h.message_id == shown_question)
        await pilot.press("enter")
        await wait_until(pilot, lambda: again.selection() is not None
                         and again.selection().message_id == shown_question, TURN_TIMEOUT)
        assert again.engine.leaf == shown


async def test_a_query_fts5_cannot_read_is_said_under_the_box(make_app):
    app, seen = make_app(session="s")
    async with app.run_test(size=WIDE, message_hook=seen) as pilot:
        await opened(pilot, seen)
        await send_text(pilot, app, seen, "Name a fruit.")
        screen = await search_box(pilot, '"fruit')
        status = screen.query_one("#search-status", Static)
        assert str(status.render()).startswith("Search: cannot search for '\"fruit'") and status.has_class("-error")
        assert not screen.query_one(OptionList).display
        screen.query_one(Input).value = "fruit"
        await pilot.pause()
        assert not status.has_class("-error") and screen.hits
