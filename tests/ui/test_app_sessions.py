"""Saved sessions in the TUI: autosave, resume with the KV cache, the sessions screen (F6).

Real default model throughout; tests/conftest.py points the data folder (where the session
database lives) at tmp_path for every test.
"""

from __future__ import annotations

import sqlite3
from types import SimpleNamespace

import pytest
from textual.notifications import Notify
from textual.widgets import DataTable, TextArea

from chatapp import paths
from chatapp.config import Settings
from chatapp.engine.opening import open_engine
from chatapp.engine.events import Message as ChatMessage
from chatapp.engine.sessions import SessionManager
from chatapp.engine.sessions.reports import ResumeReport
from chatapp.engine.sessions.store import ModelIdentity, Snapshot
from chatapp.ui.app import ChatApp
from chatapp.ui.messages import PrefillProgressed, ReplyProgress, TurnFinished
from chatapp.ui.screens.sessions import ConfirmScreen, NameScreen, SessionsScreen
from chatapp.ui.controllers.sessions import other_model
from chatapp.ui.widgets.kv_panel import KVPanel
from chatapp.ui.widgets.paint import Sketch
from chatapp.ui.widgets.speed_panel import SpeedPanel
from chatapp.ui.widgets.transcript import Notice, Reply, Transcript, UserMessage
from tests.ui._helpers import (
    NARROW, TURN_TIMEOUT, WIDE, Messages, finished, header, notified, opened, press_in_name_box, send_text, store,
    texts, wait_until)

# Incognito: these tests are about sessions opened and saved on purpose; keeping every chat
# is tests/ui/test_first_hour_sessions.py.
pytestmark = pytest.mark.app_settings(max_tokens=16, threads=0, opener=None, incognito=True)


# --- autosave and resume ------------------------------------------------------------------------
async def test_a_turn_is_saved_and_a_new_app_resumes_it_with_its_kv_cache(make_app):
    app, seen = make_app(session="s1")
    async with app.run_test(size=WIDE, message_hook=seen) as pilot:
        assert (await opened(pilot, seen)).live.report.created
        first = (await send_text(pilot, app, seen, "Name a colour.")).record
        assert first.extra["session"] == "s1"
        (summary,) = store().store.summaries()
        assert (summary.name, summary.turns) == ("s1", 1)
        assert store().state_size(summary.state_key) > 0
    app.release_engine()

    again, seen = make_app(session="s1")
    async with again.run_test(size=WIDE, message_hook=seen) as pilot:
        report = (await opened(pilot, seen)).live.report
        assert report.restored
        assert "session: s1" in header(again)
        assert texts(again, UserMessage) == ["Name a colour."]
        assert texts(again, Reply) == [first.reply]
        notices = [n.render().plain for n in again.query_one(Transcript).query(Notice)]
        assert any(n.startswith("session s1: restored ") for n in notices)
        await pilot.pause()
        # One notice per event: the transcript says it; no toast says it again (issue 59).
        assert not [m for m in seen.of(Notify) if "restored" in m.notification.message]
        kv = again.query_one(KVPanel)
        assert kv.kv_used == report.restored_tokens > 0
        assert "restored from the session" in kv.plain

        record = (await send_text(pilot, again, seen, "And another one?")).record
        assert record.restored_tokens == report.restored_tokens > 0
        assert record.cached_tokens >= record.restored_tokens
        assert record.prefill_tokens == record.prompt_tokens - record.cached_tokens
        assert record.prefill_tokens < record.prompt_tokens - first.prompt_tokens + 8
        speed = again.query_one(SpeedPanel)
        assert "restored_tokens" in speed.figures
        assert f"restored {report.restored_tokens:,} tok from the session" in \
            speed.query_one("#speed-figures", Sketch).plain
    assert store().store.summaries()[0].turns == 2


async def test_a_stopped_turn_is_saved_and_quitting_saves_the_rest(make_app):
    app, seen = make_app(session="long", max_tokens=1000, n_ctx=2048)  # still streaming when Esc comes
    async with app.run_test(size=NARROW, message_hook=seen) as pilot:
        await opened(pilot, seen)
        app.query_one("#composer").load_text("Write a long story about a dragon who learns to fly.")
        await pilot.press("enter")
        await wait_until(pilot, lambda: app.generating and app.engine.messages[-1].role == "user")
        app.sessions_ui.request("new", "later")  # changes the conversation: waits for the turn
        await pilot.pause()
        await notified(pilot, seen, lambda n: "cannot start a new session while a reply is being written"
                       in n.message)
        await wait_until(pilot, lambda: seen.count(ReplyProgress), TURN_TIMEOUT)
        assert app.generating
        await pilot.press("escape")
        record = (await finished(pilot, app, seen)).record
        assert record.finish_reason == "stopped"
        # The autosave follows TurnFinished on the turn's worker.
        await wait_until(pilot, lambda: store().store.get("long").messages[-1].stopped)

        app.engine.set_system_prompt("You answer briefly.")  # not a turn: only quitting saves it
        await pilot.press("ctrl+q")
        await wait_until(pilot, lambda: app.return_code is not None, 10)
    assert app.release_engine() == []
    assert store().store.get("long").system_prompt == "You answer briefly."

    again, seen = make_app(session="long")
    async with again.run_test(size=NARROW, message_hook=seen) as pilot:
        await opened(pilot, seen)
        assert again.engine.system_prompt == "You answer briefly."
        (reply,) = again.query_one(Transcript).query(Reply)
        assert reply.has_class("-stopped") and reply.source == record.reply
        assert any("stopped" in n.render().plain for n in again.query_one(Transcript).query(Notice))


LONG_PROMPT = " ".join(f"Line {i}: the keeper trimmed the wick and wrote in the log." for i in range(170))
"""About 3,000 tokens: prefilled in several chunks, so a key can land between two of them."""


@pytest.mark.parametrize("phase", ["prefill", "decode"])
async def test_ctrl_q_during_a_turn_quits_and_the_session_keeps_the_turn_marked_stopped(make_app, phase):
    if phase == "prefill":
        app, seen = make_app(session="quit", n_ctx=4096, max_tokens=64)
        text = LONG_PROMPT
    else:  # a reply long enough to still be streaming when Ctrl+Q comes
        app, seen = make_app(session="quit", n_ctx=2048, max_tokens=1000)
        text = "Write a long story about a dragon who learns to fly."
    async with app.run_test(size=NARROW, message_hook=seen) as pilot:
        await opened(pilot, seen)
        app.query_one("#composer").load_text(text)
        await pilot.press("enter")
        if phase == "prefill":  # the first chunk is in, the others are not
            await wait_until(pilot, lambda: seen.count(PrefillProgressed), TURN_TIMEOUT)
            progress = seen.of(PrefillProgressed)[0].event
            assert 0 < progress.done < progress.total
        else:  # the first reply text is out
            await wait_until(pilot, lambda: seen.count(ReplyProgress), TURN_TIMEOUT)
        assert app.generating
        await pilot.press("ctrl+q")
        await wait_until(pilot, lambda: app.return_code is not None, 10)
    assert not app.is_running
    assert app.release_engine() == []  # waits for the turn's worker, then saves what is left

    saved = store().store.get("quit")
    assert [m.role for m in saved.messages] == ["system", "user", "assistant"]
    question, reply = saved.messages[1:]
    assert question.content == text
    assert reply.stopped and reply == app.engine.messages[-1]
    ((index, record),) = store().store.turn_records("quit")  # the turn's own record was saved with it
    assert index == 2 and record["finish_reason"] == "stopped" and record["reply"] == reply.content
    assert saved.kv_tokens == record["kv_used"] > 0 and store().state_size(saved.state_key) > 0
    if phase == "prefill":
        assert record["generated_tokens"] == 0 and reply.content == ""
        assert 0 < record["prefill_tokens"] < record["prompt_tokens"] - record["cached_tokens"]
    else:
        assert 0 < record["generated_tokens"] < 1000 and reply.content.strip()


async def test_without_a_session_nothing_is_saved(make_app):
    app, seen = make_app()
    async with app.run_test(size=NARROW, message_hook=seen) as pilot:
        await send_text(pilot, app, seen, "Hi!")
        assert "incognito: not kept" in header(app)
    app.release_engine()
    assert store().store.summaries() == []


async def test_a_system_prompt_from_the_command_line_replaces_the_sessions_from_its_next_turn(make_app,
                                                                                            default_model_path):
    app, seen = make_app(session="s1")
    async with app.run_test(size=NARROW, message_hook=seen) as pilot:
        await opened(pilot, seen)
        await send_text(pilot, app, seen, "Name a colour.")
    app.release_engine()

    pirate = "You are a pirate. Answer like one."  # `chatapp chat --session s1 --system ...`
    settings = Settings().replace(n_ctx=1024, temperature=0.0, max_tokens=16, system_prompt=pirate)
    again = ChatApp(open_engine(settings, str(default_model_path)), settings=settings, session="s1",
                    system_prompt=pirate)
    seen = Messages()
    try:
        async with again.run_test(size=NARROW, message_hook=seen) as pilot:
            report = (await opened(pilot, seen)).live.report
            assert report.fallback == "the system prompt changed" and not report.restored
            assert again.engine.system_prompt == pirate
            assert texts(again, UserMessage) == ["Name a colour."]  # the transcript is kept
            line = (f"session s1: saved KV state not used (the system prompt changed); re-prefilling "
                    f"{report.reprefill_tokens:,} tokens from the transcript with the next turn")
            assert line in [n.render().plain for n in again.query_one(Transcript).query(Notice)]
            await pilot.pause()
            assert not [m for m in seen.of(Notify) if m.notification.message == line]  # said once

            record = (await send_text(pilot, again, seen, "And another one?")).record
            assert record.cached_tokens == 0 and record.prefill_tokens == record.prompt_tokens
            history = again.engine.messages[:-2]
            assert history[0].content == pirate
            assert report.reprefill_tokens == len(again.engine.prompt_ids(history, add_generation_prompt=False))
            assert record.prompt_tokens == len(again.engine.prompt_ids([*history, ChatMessage("user",
                                                                                              "And another one?")]))
    finally:
        again.release_engine()
    assert store().store.get("s1").system_prompt == pirate


async def test_a_new_system_prompt_mid_chat_says_the_next_turn_prefills_again(make_app):
    app, seen = make_app()
    async with app.run_test(size=NARROW, message_hook=seen) as pilot:
        await send_text(pilot, app, seen, "Name a colour.")
        await pilot.press("ctrl+s")
        app.screen.query_one(TextArea).load_text("You answer in one word.")
        await pilot.press("ctrl+s")
        await notified(pilot, seen, lambda n: n.message == "System prompt set; the next turn prefills the "
                       "conversation again (the cache starts with the old one)")
        record = (await send_text(pilot, app, seen, "Another?")).record
        system_at = len(app.engine.prompt_ids(app.engine.messages[:1], add_generation_prompt=False))
        assert record.cached_tokens < system_at  # at most the template's opening, before the prompt's text


# --- the sessions screen ------------------------------------------------------------------------
async def test_save_as_new_and_open_from_the_sessions_screen(make_app):
    app, seen = make_app()
    async with app.run_test(size=WIDE, message_hook=seen) as pilot:
        first = (await send_text(pilot, app, seen, "Name a fruit.")).record
        await pilot.press("f6")
        assert isinstance(app.screen, SessionsScreen)
        assert app.screen.query_one(DataTable).row_count == 0
        await pilot.press("s")
        await press_in_name_box(pilot, "fruit")
        await opened(pilot, seen)
        assert not isinstance(app.screen, SessionsScreen)
        assert app.sessions_ui.live.name == "fruit" and "session: fruit" in header(app)
        assert texts(app, Reply) == [first.reply]  # the chat stays
        saved = store().store.get("fruit")
        assert [m.content for m in saved.messages if m.role == "user"] == ["Name a fruit."]
        assert store().state_size(saved.state_key) > 0

        await pilot.press("f6")
        await pilot.press("n")
        await press_in_name_box(pilot, "fruit")  # taken
        await notified(pilot, seen, lambda n: "already exists" in n.message)
        await pilot.press("n")
        await press_in_name_box(pilot, "fresh")
        await opened(pilot, seen, 2)
        assert app.sessions_ui.live.name == "fresh"
        assert not app.query_one(Transcript).query(Reply)
        assert [m.role for m in app.engine.messages] == ["system"]
        # The cache keeps the old chat's cells (its system prompt is reused): the panel says what it holds.
        assert app.query_one(KVPanel).kv_used == app.engine.kv_used() == app.branch.figures.cells
        assert app.query_one(KVPanel).record is None
        assert {s.name for s in store().store.summaries()} == {"fruit", "fresh"}

        await pilot.press("f6")
        screen = app.screen
        table = screen.query_one(DataTable)
        assert table.row_count == 2
        rows = [[str(cell) for cell in table.get_row_at(i)] for i in range(table.row_count)]  # cells are Text
        assert rows[0][0] == "fresh (open)"  # most recently used first
        fruit = next(r for r in rows if r[0] == "fruit")
        # name, first question, model, turns, …
        assert fruit[1] == "Name a fruit." and fruit[2].startswith(app.engine.summary.name) and fruit[3] == "1"
        table.move_cursor(row=screen.names.index("fruit"))
        await pilot.press("enter")
        opening = await opened(pilot, seen, 3)
        assert opening.live.report.restored and opening.other_model is None
        assert texts(app, UserMessage) == ["Name a fruit."] and texts(app, Reply) == [first.reply]
        assert "session: fruit" in header(app)
        assert app.query_one(KVPanel).kv_used == opening.live.report.restored_tokens
        record = (await send_text(pilot, app, seen, "And a vegetable?")).record
        assert record.restored_tokens > 0 and record.extra["session"] == "fruit"


async def test_rename_and_delete_from_the_sessions_screen(make_app):
    app, seen = make_app(session="s1")
    async with app.run_test(size=WIDE, message_hook=seen) as pilot:
        await opened(pilot, seen)
        await send_text(pilot, app, seen, "Hi!")
        await pilot.press("f6")
        screen = app.screen
        assert screen.names == ["s1"]
        await pilot.press("r")
        await press_in_name_box(pilot, "bad/name")
        assert isinstance(app.screen, NameScreen)  # refused, with the reason
        await notified(pilot, seen, lambda n: n.severity == "error" and "no path separators" in n.message)
        await press_in_name_box(pilot, "renamed")
        assert app.screen is screen and screen.names == ["renamed"]
        assert app.sessions_ui.live.name == "renamed" and "session: renamed" in header(app)
        assert [s.name for s in store().store.summaries()] == ["renamed"]

        await pilot.press("d")
        assert isinstance(app.screen, ConfirmScreen)
        await pilot.press("n")  # no
        assert screen.names == ["renamed"]
        await pilot.press("d")
        await pilot.press("y")
        await pilot.pause()
        assert screen.names == [] and store().store.summaries() == []
        assert app.sessions_ui.live is None and "incognito: not kept" in header(app)
        await pilot.press("escape")
        assert not isinstance(app.screen, SessionsScreen)
        await send_text(pilot, app, seen, "Still here?")  # no session: nothing is saved
        assert store().store.summaries() == []

        await pilot.press("ctrl+p")  # the palette saves the chat too
        await pilot.press(*"save chat as")
        await pilot.pause(0.5)
        await pilot.press("enter")
        await pilot.pause()
        await press_in_name_box(pilot, "again")
        await opened(pilot, seen, 2)
        assert app.sessions_ui.live.name == "again" and "session: again" in header(app)
        saved = store().store.get("again")
        assert [m.content for m in saved.messages if m.role == "user"] == ["Hi!", "Still here?"]


async def test_new_chat_leaves_the_open_session_as_saved(make_app):
    app, seen = make_app(session="kept")
    async with app.run_test(size=NARROW, message_hook=seen) as pilot:
        await opened(pilot, seen)
        await send_text(pilot, app, seen, "Hi!")
        await pilot.press("ctrl+n")
        await pilot.pause()
        assert app.sessions_ui.live is None and "incognito: not kept" in header(app)
        await send_text(pilot, app, seen, "Another topic.")
    assert [m.content for m in store().store.get("kept").messages if m.role == "user"] == ["Hi!"]


async def test_a_session_far_larger_than_the_context_opens_with_long_messages_cut(make_app):
    huge = "The keeper climbed the stairs at dusk and wrote the weather in the log. " * 140_000  # 10 MB
    messages = [ChatMessage("system", "Be brief."), ChatMessage("user", huge), ChatMessage("assistant", "Noted."),
                ChatMessage("user", "Name a colour."), ChatMessage("assistant", "Blue.")]
    model = ModelIdentity("smollm2-135m-instruct", "/m.gguf", "ab" * 32, "Q4_1")
    SessionManager.open(Settings()).store.save(Snapshot("big", model, messages, 1, 0))
    app, seen = make_app(session="big")
    async with app.run_test(size=WIDE, message_hook=seen) as pilot:
        opening = await opened(pilot, seen)
        assert "the transcript from its saved window on is longer than the context" in opening.live.report.notice
        cut, question = texts(app, UserMessage)
        assert cut.startswith(huge[:1000]) and len(cut) < 25_000 and "more characters not shown" in cut
        assert question == "Name a colour." and "session: big" in header(app)
        assert isinstance(await send_text(pilot, app, seen, "And another?"), TurnFinished)
    saved = store().store.get("big").messages
    assert saved[:5] == messages and saved[5].content == "And another?" and len(saved) == 7


# --- problems are one line ------------------------------------------------------------------------
async def test_a_newer_session_database_is_one_line_and_the_app_keeps_running(make_app):
    paths.sessions_dir().mkdir(parents=True)
    with sqlite3.connect(paths.sessions_dir() / "sessions.db") as conn:
        conn.execute("PRAGMA user_version = 999")
    app, seen = make_app(session="s1")
    async with app.run_test(size=NARROW, message_hook=seen) as pilot:
        await pilot.pause()
        await notified(pilot, seen, lambda n: n.severity == "error" and "newer chatapp" in n.message
                       and "\n" not in n.message)
        assert "incognito: not kept" in header(app) and app.sessions_ui.live is None
        await pilot.press("f6")
        await pilot.pause()
        assert not isinstance(app.screen, SessionsScreen)
        assert isinstance(await send_text(pilot, app, seen, "Hi"), TurnFinished)


async def test_an_invalid_session_name_at_start_is_one_line(make_app):
    app, seen = make_app(session="../escape")
    async with app.run_test(size=NARROW, message_hook=seen) as pilot:
        await pilot.pause()
        await notified(pilot, seen, lambda n: n.severity == "error" and "invalid session name" in n.message)
        assert "incognito: not kept" in header(app)


def live_on(fingerprint: dict, name: str = "smollm2", quant: str = "Q4_1") -> SimpleNamespace:
    """What other_model reads of a LiveSession: its report, fingerprint and engine's summary."""
    return SimpleNamespace(report=ResumeReport("s", False, 3), fingerprint=fingerprint,
                           engine=SimpleNamespace(summary=SimpleNamespace(name=name, quant=quant)))


def test_other_model_names_the_model_a_session_was_saved_with():
    saved = ModelIdentity("other-model", "/m/other.gguf", "a" * 64, "Q8_0")
    assert other_model(saved, live_on({"model_sha256": "b" * 64})) == "other-model (Q8_0)"
    assert other_model(saved, live_on({"model_sha256": "a" * 64})) is None
    assert other_model(None, live_on({"model_sha256": "b" * 64})) is None


def test_other_model_across_backends_compares_name_and_quant():
    """A llama-server has no model_sha256 (its identity is the model's path and size): a session
    moving between backends is on the same model when the name and quant are the same."""
    in_process = ModelIdentity("smollm2", "/m/s.gguf", "a" * 64, "Q4_1")
    on_server = ModelIdentity("smollm2", "/srv/s.gguf", "/srv/s.gguf#123", "Q4_1")
    server = {"backend": "llama-server", "model_id": "/srv/s.gguf#123"}
    assert other_model(in_process, live_on(server)) is None
    assert other_model(on_server, live_on({"model_sha256": "a" * 64})) is None
    assert other_model(in_process, live_on(server, name="gemma")) == "smollm2 (Q4_1)"
    assert other_model(on_server, live_on({"backend": "llama-server", "model_id": "/srv/g.gguf#9"})) == \
        "smollm2 (Q4_1)"
