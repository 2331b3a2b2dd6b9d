"""The TUI when its session is changed elsewhere, its database is damaged, a name is long, a theme
isn't chatapp's, or a sampling value is out of range. Real default model throughout."""

from __future__ import annotations

import pytest
import asyncio
import os
import subprocess
import sys
import threading
from pathlib import Path

from textual.command import CommandPalette
from textual.notifications import Notify
from textual.widgets import Input, Label, OptionList

from chatapp import paths
from chatapp.config import Settings, load_settings
from chatapp.engine.events import Message as ChatMessage
from chatapp.engine.sessions import SessionManager
from chatapp.engine.sessions.store import ModelIdentity, Snapshot
from chatapp.ui.messages import SessionSaved, TurnFinished, TurnStarted
from chatapp.ui.screens.session_changed import SessionChangedScreen
from chatapp.ui.screens.sessions import ConfirmScreen, SessionsScreen
from chatapp.ui.themes import load_themes
from chatapp.ui.widgets.composer import Composer
from chatapp.ui.widgets.transcript import UserMessage
from tests.ui._helpers import NARROW, TURN_TIMEOUT, WIDE, header, notified, opened, send_text, store, texts, wait_until

# Incognito: these tests are about sessions opened and saved on purpose; keeping every chat
# is tests/ui/test_first_hour_sessions.py.
pytestmark = pytest.mark.app_settings(max_tokens=16, threads=0, opener=None, incognito=True)

EXE = Path(sys.executable).with_name("chatapp")


def cli_ask(session: str, prompt: str) -> None:
    """Another process: a real `chatapp ask --session` on the same session."""
    out = subprocess.run([str(EXE), "ask", "--session", session, prompt, "--temperature", "0", "--max-tokens", "8",
                          "--ctx", "1024"], capture_output=True, text=True, env=os.environ.copy(), timeout=300)
    assert out.returncode == 0, out.stderr


def user_turns(name: str) -> list[str]:
    return [m.content for m in store().store.get(name).messages if m.role == "user"]


# --- the open session changed by another process --------------------------------------------------------
async def test_a_cli_turn_on_the_open_session_is_noticed_and_reloaded(make_app):
    app, seen = make_app(session="s")
    async with app.run_test(size=WIDE, message_hook=seen) as pilot:
        await opened(pilot, seen)
        await send_text(pilot, app, seen, "Hi!")
        await asyncio.to_thread(cli_ask, "s", "Name a colour.")
        composer = app.query_one(Composer)
        composer.load_text("And a fruit?")
        await pilot.press("enter")
        await wait_until(pilot, lambda: isinstance(app.screen, SessionChangedScreen))
        assert seen.count(TurnStarted) == 1 and composer.text == "And a fruit?"  # nothing sent, nothing lost
        await pilot.press("r")
        await opened(pilot, seen, 2)
        assert texts(app, UserMessage) == ["Hi!", "Name a colour."]
        app.query_one(Composer).focus()
        await pilot.press("enter")
        await wait_until(pilot, lambda: seen.count(TurnFinished) == 2, TURN_TIMEOUT)
        await wait_until(pilot, lambda: not app.generating)
    assert user_turns("s") == ["Hi!", "Name a colour.", "And a fruit?"]


async def test_keeping_the_chat_leaves_the_session_as_the_other_process_saved_it(make_app):
    app, seen = make_app(session="s")
    async with app.run_test(size=NARROW, message_hook=seen) as pilot:
        await opened(pilot, seen)
        await send_text(pilot, app, seen, "Hi!")
        await asyncio.to_thread(cli_ask, "s", "Name a colour.")
        app.query_one(Composer).load_text("And a fruit?")
        await pilot.press("enter")
        await wait_until(pilot, lambda: isinstance(app.screen, SessionChangedScreen))
        await pilot.press("k")
        await pilot.pause()
        assert app.sessions_ui.live is None and "incognito: not kept" in header(app)
        await send_text(pilot, app, seen, "And a fruit?")
    assert user_turns("s") == ["Hi!", "Name a colour."]


def append_elsewhere(name: str) -> None:
    """Another process appends a turn to the session (the same SQL an `ask` runs)."""
    manager = store()
    stored = manager.store.get(name)
    messages = stored.messages + [ChatMessage("user", "Elsewhere?"), ChatMessage("assistant", "Yes.")]
    manager.store.save(Snapshot(name, stored.model, messages, stored.window_start, 0), base=stored.revision)


async def test_a_save_during_a_turn_is_refused_not_overwritten_and_offers_a_reload(make_app):
    app, seen = make_app(session="s", max_tokens=400)
    story = "Write a long story about a ship."
    started, done = threading.Event(), threading.Event()

    def hook(message) -> None:
        seen(message)
        if isinstance(message, TurnStarted) and message.user_text == story:
            started.set()

    def other_process() -> None:
        # Its own thread: the app's UI thread gives way to decoding and could come too late.
        if started.wait(TURN_TIMEOUT):
            append_elsewhere("s")
        done.set()

    async with app.run_test(size=WIDE, message_hook=hook) as pilot:
        await opened(pilot, seen)
        await send_text(pilot, app, seen, "Hi!")
        threading.Thread(target=other_process, daemon=True).start()
        app.query_one(Composer).load_text(story)
        await pilot.press("enter")
        await wait_until(pilot, lambda: seen.count(TurnFinished) == 2, TURN_TIMEOUT)
        assert done.is_set() and seen.of(TurnFinished)[-1].record.decode_tokens > 50
        await wait_until(pilot, lambda: isinstance(app.screen, SessionChangedScreen))
        assert app.screen.unsaved_turn
        [saved] = [m for m in seen.of(SessionSaved) if m.error]
        assert "session changed by another process" in saved.error
        await pilot.press("escape")  # decide later: the next turn asks again
        await pilot.press(*"Again?")
        await pilot.press("enter")
        await wait_until(pilot, lambda: isinstance(app.screen, SessionChangedScreen))
    assert user_turns("s") == ["Hi!", "Elsewhere?"]


async def test_a_session_removed_elsewhere_is_let_go_with_a_warning(make_app):
    app, seen = make_app(session="s")
    async with app.run_test(size=NARROW, message_hook=seen) as pilot:
        await opened(pilot, seen)
        await send_text(pilot, app, seen, "Hi!")
        store().delete("s")
        await send_text(pilot, app, seen, "Still there?")
        await notified(pilot, seen, lambda n: "session 's' was removed by another process; this chat is no longer "
                                              "saved" in n.message)
        assert app.sessions_ui.live is None
    assert store().store.summaries() == []


# --- F6 with a damaged database -------------------------------------------------------------------------
async def test_f6_with_a_damaged_database_shows_the_error_not_an_empty_list(make_app):
    manager = SessionManager.open(Settings())
    model = ModelIdentity("m", "/m.gguf", "ab" * 32, "Q4_1")
    for i in range(40):
        manager.store.save(Snapshot(f"s{i}", model, [ChatMessage("system", "x" * 500)], 1, 0))
    db = manager.store.path
    data = bytearray(db.read_bytes())
    page = int.from_bytes(data[16:18], "big")
    data[page:] = b"\xa5" * (len(data) - page)  # every page but the first (the schema) is garbage
    db.write_bytes(bytes(data))
    app, seen = make_app()
    async with app.run_test(size=NARROW, message_hook=seen) as pilot:
        await pilot.press("f6")
        # With the search index's tables and triggers the schema no longer fits the first page, so
        # the garbage reaches it and the database cannot even be opened: F6 then says so in one
        # line. Where the schema survives, the dialog opens and says it instead of a list.
        said = lambda: [n for n in (m.notification for m in seen.of(Notify)) if "malformed" in n.message]  # noqa: E731
        await wait_until(pilot, lambda: isinstance(app.screen, SessionsScreen) or said())
        if isinstance(app.screen, SessionsScreen):
            empty = app.screen.query_one("#sessions-empty")
            shown = str(empty.render())
            assert empty.display and "Cannot read the saved sessions" in shown and "malformed" in shown
            assert "No saved sessions yet" not in shown
        else:
            (line,) = said()
            assert "\n" not in line.message and line.severity == "error"


# --- the delete question at 80 and 100 columns -----------------------------------------------------------
async def test_the_delete_question_is_whole_at_80_and_100_columns(make_app):
    name = "n" * 64
    SessionManager.open(Settings()).store.save(
        Snapshot(name, ModelIdentity("m", "/m.gguf", "ab" * 32, "Q4_1"), [ChatMessage("system", "x")], 1, 0))
    for size in (NARROW, (100, 30)):
        app, seen = make_app()
        async with app.run_test(size=size, message_hook=seen) as pilot:
            await pilot.press("f6")
            await wait_until(pilot, lambda: isinstance(app.screen, SessionsScreen))
            await pilot.press("d")
            await wait_until(pilot, lambda: isinstance(app.screen, ConfirmScreen))
            await pilot.pause()
            label = app.screen.query_one(Label)
            shown = "".join(label.render_line(y).text for y in range(label.size.height))
            assert "".join(shown.split()) == "".join(f"{app.screen.question} (y/n)".split())
            assert label.region.right <= size[0] and label.region.bottom <= size[1]
            for button in ("#yes", "#no"):
                region = app.screen.query_one(button).region
                assert region.right <= size[0] and region.bottom <= size[1]


# --- themes: the picker and `chatapp themes list` agree ----------------------------------------------------
async def test_the_theme_picker_offers_what_themes_list_lists(make_app):
    app, seen = make_app()
    async with app.run_test(size=WIDE, message_hook=seen) as pilot:
        await pilot.press("ctrl+t")
        await wait_until(pilot, lambda: isinstance(app.screen, CommandPalette))
        await pilot.pause(0.5)
        options = app.screen.query_one(OptionList)
        prompts = [str(options.get_option_at_index(i).prompt) for i in range(options.option_count)]
        assert {prompt.splitlines()[0] for prompt in prompts} == set(load_themes().names())
        marked = [prompt for prompt in prompts if "the theme now" in prompt]
        assert [prompt.splitlines()[0] for prompt in marked] == [app.theme]  # the current one is marked
        await pilot.press(*"textual-dark")
        await pilot.pause(0.5)
        await pilot.press("enter")
        await pilot.pause()
        assert app.theme != "textual-dark" and not paths.config_file().exists()


async def test_a_configured_textual_theme_is_refused_as_themes_list_warns(make_app):
    app, seen = make_app(theme="textual-dark")
    async with app.run_test(size=NARROW, message_hook=seen) as pilot:
        await notified(pilot, seen, lambda n: "theme 'textual-dark' is not available" in n.message)
        assert app.theme == "chatapp-dark"


# --- the sampling screen goes through the config's validation ---------------------------------------------
async def test_the_sampling_screen_refuses_what_the_config_refuses(make_app):
    app, seen = make_app()
    async with app.run_test(size=NARROW, message_hook=seen) as pilot:
        await pilot.press("ctrl+o")
        screen = app.screen
        for value, message in (("1e9", "temperature must be 0 (greedy) to 5, got 1000000000.0"),
                               ("-1", "temperature must be 0 or more, got -1.0")):
            screen.query_one("#temperature", Input).value = value
            screen.query_one("#temperature", Input).focus()
            await pilot.press("enter")
            await pilot.pause()
            assert app.screen is screen
            assert message in str(screen.query_one("#sampling-error").render())
        screen.query_one("#temperature", Input).value = "0.3"
        await pilot.press("enter")
        await pilot.pause()
        assert app.engine.generation.temperature == 0.3
    assert load_settings().temperature == Settings().temperature  # the screen changes this chat only
