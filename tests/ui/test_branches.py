"""Conversation trees in the TUI (chatapp.ui.controllers.branches), driven through the pilot against the
real default model: selecting, editing, regenerating, continuing from a reply, sibling arrows,
the tree screen, deleting with confirmation, forking into a session, and what the KV and
Tokens panels say each one cost."""

from __future__ import annotations

import pytest
from rich.console import Console
from textual.command import CommandPalette
from textual.widgets import Input, Tree

from chatapp.config import Settings
from chatapp.engine.sessions import SessionManager
from chatapp.ui.controllers.branches import BranchAction
from chatapp.ui.controllers.turns import TurnHow
from chatapp.ui.commands import COMMANDS
from chatapp.ui.messages import BranchChanged, SessionOpened, TurnFailed, TurnFinished, TurnStarted
from chatapp.ui.screens.help import HelpScreen
from chatapp.ui.screens.sessions import ConfirmScreen, NameScreen
from chatapp.ui.screens.tree import TreeScreen
from chatapp.ui.widgets.composer import Composer
from chatapp.ui.widgets.kv_panel import KVPanel
from chatapp.ui.widgets.tokens_panel import TokensPanel
from chatapp.ui.widgets.transcript import Transcript, UserMessage
from tests.ui._helpers import TURN_TIMEOUT, WIDE, finished, send_text, wait_until

pytestmark = pytest.mark.app_settings(threads=0)


def path_ids(app) -> list[str]:
    return [m.id for m in app.engine.messages if m.id]


def drawn(app) -> list[tuple[str, str, int, int]]:
    """(kind, id, position, siblings) of each message widget in the transcript."""
    return [("user" if isinstance(w, UserMessage) else "assistant", w.message_id, w.position, w.siblings)
            for w in app.query_one(Transcript).messages()]


def assert_drawn_is_the_path(app) -> None:
    tree = app.engine.tree
    expected = []
    for message in tree.path():
        family, index = tree.siblings(message.id)
        expected.append((message.role, message.id, index + 1, len(family)))
    assert drawn(app) == expected


async def branch_changed(pilot, seen, n: int) -> BranchChanged:
    await wait_until(pilot, lambda: seen.count(BranchChanged) >= n, TURN_TIMEOUT)
    await wait_until(pilot, lambda: not any(w.group == "branch" and w.is_running for w in pilot.app.workers),
                     TURN_TIMEOUT)
    await pilot.pause()
    return seen.of(BranchChanged)[n - 1]


async def select(pilot, app, index: int) -> None:
    """Select the message at `index` of the path with Alt+Up, from the last one."""
    transcript = app.query_one(Transcript)
    transcript.select(None)
    await pilot.press("alt+up")
    for _ in range(len(transcript.messages()) - 1 - index):
        await pilot.press("alt+up")
    assert transcript.selected_index() == index


async def two_turns(pilot, app, seen) -> None:
    await send_text(pilot, app, seen, "Name a colour.")
    await send_text(pilot, app, seen, "Name a fruit.")


async def test_messages_show_their_ids_and_are_selected_by_keys_and_clicks(make_app):
    app, seen = make_app()
    async with app.run_test(size=WIDE, message_hook=seen) as pilot:
        await two_turns(pilot, app, seen)
        assert_drawn_is_the_path(app)
        ids = path_ids(app)
        transcript = app.query_one(Transcript)
        assert [w.border_title for w in transcript.messages()] == [
            f"you · {ids[0]}", f"assistant · {ids[1]}", f"you · {ids[2]}", f"assistant · {ids[3]}"]
        await pilot.press("alt+up")
        assert transcript.selected_index() == 3 and transcript.selected.has_class("-selected")
        await pilot.press("alt+up", "alt+up", "alt+up", "alt+up")
        assert transcript.selected_index() == 0  # stays at the first
        await pilot.press("alt+down")
        assert transcript.selected_index() == 1
        first = transcript.messages()[0]
        transcript.scroll_to_widget(first, animate=False)
        await pilot.pause()
        await pilot.click(first)
        assert transcript.selected is first and not transcript.messages()[1].has_class("-selected")


async def test_ctrl_r_keeps_the_old_reply_as_a_sibling(make_app):
    app, seen = make_app()
    async with app.run_test(size=WIDE, message_hook=seen) as pilot:
        first = (await send_text(pilot, app, seen, "Name a colour.")).record
        question, old_reply = path_ids(app)
        await pilot.press("ctrl+r")
        again = (await finished(pilot, app, seen, 2)).record
        assert seen.of(TurnStarted)[-1].regenerate
        tree = app.engine.tree
        assert [m.id for m in tree.children(question)] == [old_reply, again.extra["message_id"]]
        assert tree[old_reply].content == first.reply  # kept, word for word
        assert again.extra["action"] == "regenerate" and again.extra["branch"] == "2/2"
        assert drawn(app) == [("user", question, 1, 1), ("assistant", again.extra["message_id"], 2, 2)]
        line = f"kept {again.cached_tokens:,} tokens up to the question; prefilled {again.prefill_tokens:,}"
        assert app.query_one(KVPanel).note.startswith(line)
        assert app.query_one(TokensPanel).note == app.query_one(KVPanel).note
        # The sibling arrows bring the first reply back, restored.
        await pilot.press("alt+left")
        switched = await branch_changed(pilot, seen, 1)
        assert path_ids(app) == [question, old_reply]
        assert_drawn_is_the_path(app)
        assert app.query_one(KVPanel).note == switched.switch.describe() == switched.line
        assert switched.switch.position == 1 and switched.switch.siblings == 2


async def test_edit_a_question_asks_it_beside_the_old_one(make_app):
    app, seen = make_app()
    async with app.run_test(size=WIDE, message_hook=seen) as pilot:
        await two_turns(pilot, app, seen)
        old = path_ids(app)
        await select(pilot, app, 2)
        await pilot.press("alt+e")
        composer = app.query_one(Composer)
        assert composer.text == "Name a fruit." and app.branches_ui.pending is not None
        record = (await send_text(pilot, app, seen, "Name a vegetable.")).record
        assert record.extra["action"] == "edit" and record.extra["branch"] == "2/2"
        now = path_ids(app)
        assert now[:2] == old[:2] and now[2] != old[2]
        assert app.engine.tree[now[2]].content == "Name a vegetable."
        assert old[2] in app.engine.tree and old[3] in app.engine.tree  # the old branch stays
        assert_drawn_is_the_path(app)
        assert drawn(app)[2][2:] == (2, 2)
        line = f"kept {record.cached_tokens:,} tokens up to your edit; prefilled {record.prefill_tokens:,}"
        assert record.cached_tokens > 0 and app.query_one(KVPanel).note.startswith(line)
        assert app.query_one(TokensPanel).note.startswith(line)
        assert app.branches_ui.pending is None
        # ‹ 1/2 ›: the first question's branch, with its reply, as it was.
        await select(pilot, app, 2)
        await pilot.press("alt+left")
        switched = await branch_changed(pilot, seen, 1)
        assert path_ids(app) == old and switched.switch.how in ("restored", "kept")
        assert_drawn_is_the_path(app)
        assert app.query_one(Transcript).selected_index() == 2  # the switched message stays selected
        await pilot.press("alt+right")
        await branch_changed(pilot, seen, 2)
        assert path_ids(app) == now


async def test_esc_cancels_a_pending_edit(make_app):
    app, seen = make_app()
    async with app.run_test(size=WIDE, message_hook=seen) as pilot:
        await send_text(pilot, app, seen, "Name a colour.")
        await select(pilot, app, 0)
        await pilot.press("alt+e", "escape")
        assert app.branches_ui.pending is None
        record = (await send_text(pilot, app, seen, "Name a fruit.")).record
        assert record.extra["action"] == "send" and len(path_ids(app)) == 4


async def test_an_edit_too_long_for_the_context_is_refused_and_waits_again(make_app):
    app, seen = make_app()
    async with app.run_test(size=WIDE, message_hook=seen) as pilot:
        await two_turns(pilot, app, seen)
        old = path_ids(app)
        await select(pilot, app, 2)
        await pilot.press("alt+e")
        too_long = "word " * 2000  # n_ctx is 1024
        failed = await send_text(pilot, app, seen, too_long)
        assert isinstance(failed, TurnFailed) and failed.refused
        await wait_until(pilot, lambda: seen.count(BranchChanged) >= 1)
        await pilot.pause()
        assert path_ids(app) == old and len(app.engine.tree) == 4  # nothing added, the path as it was
        assert_drawn_is_the_path(app)
        assert app.query_one(Composer).text == too_long
        assert app.branches_ui.pending == TurnHow("edit", old[2])  # Enter edits again once it is shorter


async def test_continue_from_an_earlier_reply(make_app):
    app, seen = make_app()
    async with app.run_test(size=WIDE, message_hook=seen) as pilot:
        await two_turns(pilot, app, seen)
        old = path_ids(app)
        await select(pilot, app, 1)
        await pilot.press("alt+c")
        record = (await send_text(pilot, app, seen, "Name an animal.")).record
        assert record.extra["action"] == "branch" and record.extra["parent_id"] == path_ids(app)[2]
        now = path_ids(app)
        assert now[:2] == old[:2] and len(now) == 4 and app.engine.tree[now[2]].parent == old[1]
        assert_drawn_is_the_path(app)
        assert drawn(app)[2][2:] == (2, 2)
        assert app.query_one(KVPanel).note.startswith(
            f"kept {record.cached_tokens:,} tokens up to the branch point; prefilled {record.prefill_tokens:,}")


async def test_edit_wants_a_question_and_continue_wants_a_reply(make_app):
    app, seen = make_app()
    async with app.run_test(size=WIDE, message_hook=seen) as pilot:
        await send_text(pilot, app, seen, "Name a colour.")
        await pilot.press("alt+e")  # nothing selected
        await select(pilot, app, 1)
        await pilot.press("alt+e")
        await select(pilot, app, 0)
        await pilot.press("alt+c")
        await pilot.pause()
        assert app.branches_ui.pending is None and app.query_one(Composer).text == ""
        lines = [n.message for n in app._notifications]
        assert any("select a message to edit first" in line for line in lines)
        assert any("only a question or a tool's result can be chosen to edit" in line for line in lines)
        assert any("only a reply can be chosen to continue from" in line for line in lines)


async def test_the_tree_screen_lists_every_branch_and_jumps(make_app):
    app, seen = make_app()
    async with app.run_test(size=WIDE, message_hook=seen) as pilot:
        await two_turns(pilot, app, seen)
        old = path_ids(app)
        await select(pilot, app, 2)
        await pilot.press("alt+e")
        await send_text(pilot, app, seen, "Name a vegetable.")
        await pilot.press("alt+t")
        await wait_until(pilot, lambda: isinstance(app.screen, TreeScreen), TURN_TIMEOUT)
        screen = app.screen
        assert set(screen.nodes) == {m.id for m in app.engine.tree.messages()}
        labels = {i: node.label.plain for i, node in screen.nodes.items()}
        leaf_old, leaf_now = old[3], path_ids(app)[3]
        engine_tokens = len(app.engine.prompt_ids(add_generation_prompt=False))
        assert f"{engine_tokens:,} tok" in labels[leaf_now] and "◀ shown" in labels[leaf_now]
        assert "KV in the cache now" in labels[leaf_now]
        assert "KV kept in memory" in labels[leaf_old]  # stashed when the edit left it
        assert labels[old[1]].endswith("⑂ 2 branches") and labels[old[0]].startswith("● ")
        tree = screen.query_one(Tree)
        tree.move_cursor(screen.nodes[leaf_old])
        await pilot.press("enter")
        switched = await branch_changed(pilot, seen, 1)
        assert not isinstance(app.screen, TreeScreen)
        assert path_ids(app) == old and switched.switch.how == "restored"
        assert_drawn_is_the_path(app)


async def test_delete_a_branch_after_confirming(make_app):
    app, seen = make_app()
    async with app.run_test(size=WIDE, message_hook=seen) as pilot:
        await two_turns(pilot, app, seen)
        old = path_ids(app)
        await select(pilot, app, 2)
        await pilot.press("alt+e")
        await send_text(pilot, app, seen, "Name a vegetable.")
        edited = path_ids(app)
        await select(pilot, app, 2)
        await pilot.press("alt+d")
        await wait_until(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        await pilot.press("n")
        await pilot.pause()
        assert not isinstance(app.screen, ConfirmScreen) and edited[2] in app.engine.tree
        await pilot.press("alt+d")
        await wait_until(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        await pilot.press("y")
        changed = await branch_changed(pilot, seen, 1)
        assert edited[2] not in app.engine.tree and edited[3] not in app.engine.tree
        assert path_ids(app) == old  # the sibling's branch is shown
        assert changed.line == f"deleted 2 messages from {edited[2]} on"
        assert_drawn_is_the_path(app)
        assert drawn(app)[2][2:] == (1, 1)


async def test_a_switch_is_saved_and_a_fork_keeps_only_the_path(make_app):
    app, seen = make_app(session="main")
    async with app.run_test(size=WIDE, message_hook=seen) as pilot:
        await wait_until(pilot, lambda: seen.count(SessionOpened), TURN_TIMEOUT)
        await two_turns(pilot, app, seen)
        old = path_ids(app)
        await select(pilot, app, 2)
        await pilot.press("alt+e")
        await send_text(pilot, app, seen, "Name a vegetable.")
        await select(pilot, app, 2)
        await pilot.press("alt+left")
        await branch_changed(pilot, seen, 1)
        manager = SessionManager.open(Settings(), create=False)
        assert manager.store.load("main").leaf == old[3] == app.engine.leaf
        await pilot.press("alt+n")
        await wait_until(pilot, lambda: isinstance(app.screen, NameScreen))
        assert app.screen.query_one(Input).value == "main (fork)"  # a name offered, the current one's
        app.screen.query_one(Input).value = "side"
        await pilot.press("enter")
        await wait_until(pilot, lambda: seen.count(SessionOpened) >= 2, TURN_TIMEOUT)
        await wait_until(pilot, lambda: not app.session_busy)
        forked = manager.store.load("side")
        assert [m.id for m in forked.tree if m.role != "system"] == old
        assert len([m for m in manager.store.load("main").tree if m.role != "system"]) == 6
        assert app.sessions_ui.name == "side" and app.engine.tree.leaves() == [old[3]]
        assert_drawn_is_the_path(app)
        record = (await send_text(pilot, app, seen, "Name a tree.")).record
        assert record.cached_tokens > 0  # the fork continues from the cache it had
        assert len(manager.store.load("side").tree) == len(forked.tree) + 2


async def test_every_branch_action_is_in_the_palette_and_the_help(make_app):
    app, seen = make_app()
    async with app.run_test(size=WIDE, message_hook=seen) as pilot:
        await pilot.press("f1")
        await wait_until(pilot, lambda: isinstance(app.screen, HelpScreen))
        console = Console(width=200, record=True)
        console.print(app.screen.table)
        text = console.export_text()
        for key, what in (("Alt+Up", "Select the message before"), ("Alt+Down", "Select the message after"),
                          ("Alt+E", "Edit the selected question"), ("Alt+C", "Continue from the selected reply"),
                          ("Alt+Left", "Previous sibling"), ("Alt+Right", "Next sibling"),
                          ("Alt+T", "The conversation as a tree"), ("Alt+D", "Delete the selected message"),
                          ("Alt+N", "Fork the shown path"), ("Ctrl+R", "Regenerate the selected reply")):
            assert any(key in line and what in line for line in text.splitlines()), key
        await pilot.press("escape")
        palette = {action for _, _, action in COMMANDS}
        assert {f"branch('{action}')" for action in BranchAction.__args__} | {"regenerate"} <= palette
        await pilot.press("ctrl+p")
        await wait_until(pilot, lambda: isinstance(app.screen, CommandPalette))
        await pilot.press(*"Conversation tree", "enter")
        await wait_until(pilot, lambda: isinstance(app.screen, TreeScreen), TURN_TIMEOUT)
        assert seen.count(TurnFinished) == 0
