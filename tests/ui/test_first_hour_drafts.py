"""Nothing the user typed is lost by any key: text typed and not sent goes with the chat it was
typed in (Ctrl+N, another session, quitting) as that session's draft, and comes back when the
session is opened again; in a chat no session keeps yet, quitting asks before it drops the text."""

from __future__ import annotations

from chatapp.config import Settings
from chatapp.engine.sessions import SessionManager
from chatapp.ui.messages import SessionOpened
from chatapp.ui.screens.sessions import ConfirmScreen, SessionsScreen
from chatapp.ui.widgets.composer import Composer
from tests.ui._helpers import next_of, notified, send, wait_until

WIDE = (160, 48)
UNSENT = "a question I have not sent yet"


def draft(name: str) -> str:
    return SessionManager.open(Settings(), create=False).store.draft(name)


async def test_unsent_text_stays_with_its_session_across_ctrl_n_and_comes_back_when_it_is_opened(make_app):
    app, seen = make_app()
    async with app.run_test(size=WIDE, message_hook=seen) as pilot:
        composer = app.query_one(Composer)
        await send(pilot, "Name a colour.", seen)
        await next_of(pilot, seen, SessionOpened, 0)
        first = app.sessions_ui.name
        composer.load_text(UNSENT)
        await pilot.press("ctrl+n")
        await notified(pilot, seen, lambda n: f"your unsent text is kept with session {first}" in n.message)
        assert composer.text == "" and draft(first) == UNSENT

        await send(pilot, "Name a fruit.", seen)  # another chat, kept as another session
        await next_of(pilot, seen, SessionOpened, 1)
        second = app.sessions_ui.name
        composer.load_text("half a second question")
        await pilot.press("f6")  # newest first: the first chat is the second row
        await wait_until(pilot, lambda: isinstance(app.screen, SessionsScreen))
        await pilot.press("down", "enter")
        await next_of(pilot, seen, SessionOpened, 2, "session")
        assert app.sessions_ui.name == first and composer.text == UNSENT
        assert draft(second) == "half a second question" and draft(first) == ""  # the composer holds it now


async def test_quitting_keeps_the_unsent_text_and_the_session_opens_with_it(make_app):
    app, seen = make_app()
    async with app.run_test(size=WIDE, message_hook=seen) as pilot:
        await send(pilot, "Name a colour.", seen)
        await next_of(pilot, seen, SessionOpened, 0)
        name = app.sessions_ui.name
        app.query_one(Composer).load_text(UNSENT)
        await pilot.press("ctrl+q")
        await wait_until(pilot, lambda: app.return_code is not None, 5)
    assert app.release_engine() == []
    assert draft(name) == UNSENT

    again, seen = make_app(session=name)
    async with again.run_test(size=WIDE, message_hook=seen) as pilot:
        await next_of(pilot, seen, SessionOpened, 0, "session")
        assert again.query_one(Composer).text == UNSENT


async def test_quitting_a_chat_no_session_keeps_asks_before_dropping_what_was_typed(make_app):
    app, seen = make_app()
    async with app.run_test(size=WIDE, message_hook=seen) as pilot:
        app.query_one(Composer).load_text(UNSENT)  # no turn yet: no session keeps this chat
        await pilot.press("ctrl+q")
        await wait_until(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        assert app.return_code is None and "not sent" in app.screen.question
        await pilot.press("n")
        await wait_until(pilot, lambda: not isinstance(app.screen, ConfirmScreen))
        assert app.return_code is None and app.query_one(Composer).text == UNSENT
        await pilot.press("ctrl+q")
        await wait_until(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        await pilot.press("ctrl+q")  # the key again: yes
        await wait_until(pilot, lambda: app.return_code is not None, 5)
