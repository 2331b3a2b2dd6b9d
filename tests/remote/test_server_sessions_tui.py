"""A saved session moving between the in-process backend and a llama-server in the TUI, on the
real default model: in-process, then `chat --server URL --session NAME`, then in-process again.
Each move says the KV state is not used (it belongs to the other backend) without calling the
same model another one, shows the whole conversation, and keeps saving every turn."""

from __future__ import annotations

from textual.notifications import Notify

from chatapp.config import Settings
from chatapp.engine.opening import open_engine
from chatapp.engine.sessions import SessionManager
from chatapp.ui.app import ChatApp
from chatapp.ui.messages import SessionOpened, TurnFinished
from chatapp.ui.widgets.header import AppHeader
from chatapp.ui.widgets.transcript import Reply, Transcript, UserMessage
from tests.ui._helpers import Messages, wait_until

from .conftest import SETTINGS
from tests.remote.server_tui import TURN_TIMEOUT, WIDE, send

QUESTIONS = ("Name a colour.", "Name another one.", "And a third?")


def transcript(app: ChatApp) -> tuple[list[str], list[str]]:
    shown = app.query_one(Transcript)
    return [w.render().plain for w in shown.query(UserMessage)], [w.source for w in shown.query(Reply)]


async def one_turn_in(app: ChatApp, question: str) -> tuple[SessionOpened, list[Notify], TurnFinished]:
    """Open the app's session, check what it shows, run one turn; what opening said and the turn."""
    seen = Messages()
    async with app.run_test(size=WIDE, message_hook=seen) as pilot:
        await wait_until(pilot, lambda: seen.count(SessionOpened), TURN_TIMEOUT)
        await wait_until(pilot, lambda: not app.session_busy)
        opening = seen.of(SessionOpened)[0]
        assert "session: trip" in app.query_one(AppHeader).render().plain
        stored = SessionManager.open(Settings(), create=False).store.load("trip")
        saved = stored.messages if stored else []
        assert transcript(app) == ([m.content for m in saved if m.role == "user"],
                                   [m.content for m in saved if m.role == "assistant"])
        done = await send(pilot, app, seen, question)
        await pilot.pause()
        notes = seen.of(Notify)
    assert not app.release_engine()  # saved on quit without a problem
    assert isinstance(done, TurnFinished) and done.record.reply
    return opening, notes, done


async def test_a_session_moves_between_the_backends_and_keeps_every_turn(default_model_path, llama_server):
    def local() -> ChatApp:
        return ChatApp(open_engine(SETTINGS, str(default_model_path)), settings=SETTINGS, session="trip")

    first, _, _ = await one_turn_in(local(), QUESTIONS[0])
    assert first.live.report.created

    on_server = SETTINGS.replace(server=llama_server.url)
    engine = open_engine(on_server)
    engine.clear_cache()  # the shared server's slot may hold another test's tokens
    opening, notes, done = await one_turn_in(
        ChatApp(engine, settings=on_server, session="trip", opener=open_engine), QUESTIONS[1])
    assert opening.live.report.notice.startswith(
        "saved KV state not used (it was saved by the in-process backend; this chat runs llama-server); "
        "re-prefilling ")
    assert opening.other_model is None  # the same model, on the other backend
    assert not [n for n in notes if n.notification.severity == "error"], [n.notification.message for n in notes]
    assert done.record.extra["session"] == "trip"

    back, notes, _ = await one_turn_in(local(), QUESTIONS[2])
    assert back.live.report.notice.startswith(
        "saved KV state not used (it was saved by the llama-server backend; this chat runs in-process); ")
    assert "other model" not in back.live.report.notice and back.other_model is None
    assert not [n for n in notes if n.notification.severity == "error"]
    saved = SessionManager.open(Settings(), create=False).store.get("trip").messages
    assert [m.content for m in saved if m.role == "user"] == list(QUESTIONS)
    assert len(saved) == 7
