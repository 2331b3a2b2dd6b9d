"""One truth on screen: after every action that changes the shown branch (a turn, a regenerate,
a switch from memory and from disk, a jump from the tree, an edit, a delete of the shown branch,
a fork, a session opened, a model switched), the KV, Tokens, Speed and Model panels and the
header show the engine's own figures for the shown leaf, and the tree, the notice and the KV
panel give the branch one token count. Driven through the pilot against the real default model."""

from __future__ import annotations

import shutil

from textual.widgets import Input, Tree

from chatapp import paths
from chatapp.format import count, human_bytes
from chatapp.ui.controllers.branches import tree_snapshot
from chatapp.ui.messages import BranchChanged, ModelSwitched, SessionOpened, TurnFinished
from chatapp.ui.screens.sessions import ConfirmScreen, NameScreen
from chatapp.ui.screens.tree import TreeScreen
from chatapp.ui.widgets.header import AppHeader
from chatapp.ui.widgets.kv_panel import KVPanel
from chatapp.ui.widgets.quant_panel import QuantPanel
from chatapp.ui.widgets.speed_panel import SpeedPanel
from chatapp.ui.widgets.tokens_panel import TokensPanel
from tests.ui._helpers import TURN_TIMEOUT, next_of, send, wait_until

WIDE = (160, 48)


def assert_one_truth(app, line: str = "") -> None:
    """Every panel and the header agree with the engine's figures for the leaf shown now; `line`,
    a switch's notice, gives the branch the count the tree gives it."""
    engine = app.engine
    figures = engine.branch_figures()
    shown = app.branch
    assert shown.figures == figures, "the app shows another leaf's figures"
    kv, quant = app.query_one(KVPanel), app.query_one(QuantPanel)
    speed, tokens = app.query_one(SpeedPanel), app.query_one(TokensPanel)
    assert kv.kv_used == quant.kv_used == figures.cells == engine.kv_used()
    assert f"{count(figures.cells)} / {count(figures.n_ctx)} cells" in kv.plain
    per_token = engine.summary.kv_bytes_per_token
    assert f"KV now   {human_bytes(figures.cells * per_token)}" in quant.plain
    assert tokens.branch == shown and speed.branch == shown
    if shown.turn is None:  # no turn on this leaf since it was shown: no record of another one
        assert kv.record is None and speed.last_record is None and tokens.turn_view == ()
        assert "reused from cache" not in kv.plain
        if figures.tokens:
            assert f"branch: {count(figures.tokens)} tok" in kv.plain
            assert f"{count(figures.cached)} " in kv.plain
    else:
        record = shown.turn.record
        assert record.extra["message_id"] == figures.leaf == engine.leaf
        assert record.kv_used == figures.cells and kv.record is record and speed.last_record is record
        assert f"reused from cache: {count(record.cached_tokens)} tok" in kv.plain
        assert speed.figures["cached_tokens"] == count(record.cached_tokens)
        assert list(tokens.turn_view) == list(shown.turn.view)
    header = app.query_one(AppHeader)
    assert header.summary == engine.summary and header.session == app.sessions_ui.name
    if figures.leaf is not None:
        assert tree_snapshot(engine).tokens[figures.leaf] == figures.tokens
    if line:
        assert f"({figures.tokens:,} tokens)" in line


def path_ids(app) -> list[str]:
    return [m.id for m in app.engine.messages if m.id]


async def select(pilot, index: int) -> None:
    """Select the message at `index` of the path, with Alt+Up from the last one."""
    app = pilot.app
    app.step_selection(+len(app.engine.messages))  # the last one
    for _ in range(len(path_ids(app)) - 1 - index):
        await pilot.press("alt+up")
    assert app.selection().index == index


async def test_a_turn_a_regenerate_a_switch_an_edit_a_jump_and_a_delete_leave_one_truth(make_app):
    app, seen = make_app()
    async with app.run_test(size=WIDE, message_hook=seen) as pilot:
        await send(pilot, "Name a colour.", seen)
        assert_one_truth(app)
        await send(pilot, "Name a fruit.", seen)
        assert_one_truth(app)
        first_path = path_ids(app)

        await pilot.press("ctrl+r")  # a regenerate: ‹ 2/2 ›
        await next_of(pilot, seen, TurnFinished, 2, "turn")
        assert_one_truth(app)
        assert app.branch.note.startswith("kept ")

        await pilot.press("alt+left")  # back to the first reply (greedy: the same text, so the cache holds it)
        switched = await next_of(pilot, seen, BranchChanged, 0, "branch")
        assert switched.switch.how in ("kept", "restored")
        assert path_ids(app) == first_path
        assert_one_truth(app, switched.line)

        await select(pilot, 2)  # an edit of the second question
        await pilot.press("alt+e")
        await send(pilot, "Name a vegetable.", seen)
        assert_one_truth(app)
        edited = path_ids(app)

        await pilot.press("alt+t")  # a jump from the tree to the first path's leaf
        await wait_until(pilot, lambda: isinstance(app.screen, TreeScreen), TURN_TIMEOUT)
        app.screen.query_one(Tree).move_cursor(app.screen.nodes[first_path[3]])
        await pilot.press("enter")
        jumped = await next_of(pilot, seen, BranchChanged, 1, "branch")
        assert path_ids(app) == first_path
        assert jumped.switch.how == "restored" and jumped.switch.source == "memory"
        assert_one_truth(app, jumped.line)
        assert app.branch.restored == "memory" and "restored from memory" in app.query_one(KVPanel).plain

        await select(pilot, 2)  # the edited question again, beside the first: ‹ 2/2 ›
        await pilot.press("alt+right")
        back = await next_of(pilot, seen, BranchChanged, 2, "branch")
        assert path_ids(app) == edited
        assert_one_truth(app, back.line)

        await select(pilot, 2)
        await pilot.press("alt+d")
        await wait_until(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        await pilot.press("y")
        await next_of(pilot, seen, BranchChanged, 3, "branch")
        assert edited[2] not in app.engine.tree and path_ids(app) == first_path
        assert_one_truth(app)


async def test_a_fork_a_session_opened_and_a_switch_from_disk_leave_one_truth(make_app):
    app, seen = make_app(session="main")
    async with app.run_test(size=WIDE, message_hook=seen) as pilot:
        await next_of(pilot, seen, SessionOpened, 0)
        await send(pilot, "Name a colour.", seen)
        await send(pilot, "Name a fruit.", seen)
        await select(pilot, 2)  # another question beside the second: another cache
        await pilot.press("alt+e")
        await send(pilot, "Name a vegetable.", seen)
        assert_one_truth(app)

        await pilot.press("alt+n")  # fork the shown path into a session of its own
        await wait_until(pilot, lambda: isinstance(app.screen, NameScreen))
        app.screen.query_one(Input).value = "side"
        await pilot.press("enter")
        forked = await next_of(pilot, seen, SessionOpened, 1)
        assert forked.forked and app.sessions_ui.name == "side"
        assert_one_truth(app)

        app.sessions_ui.request("open", "main")  # back to the first session, as F6 → Enter does
        await next_of(pilot, seen, SessionOpened, 2)
        assert app.sessions_ui.name == "main"
        assert_one_truth(app)

    # A new process: the other reply's state is on disk only.
    again, seen = make_app(session="main")
    async with again.run_test(size=WIDE, message_hook=seen) as pilot:
        await next_of(pilot, seen, SessionOpened, 0)
        assert_one_truth(again)
        await pilot.press("alt+left")
        switched = await next_of(pilot, seen, BranchChanged, 0, "branch")
        assert switched.switch.how == "restored" and switched.switch.source == "disk"
        assert_one_truth(again, switched.line)
        assert "restored from disk" in again.query_one(KVPanel).plain


async def test_a_model_switch_leaves_one_truth(make_app, default_model_path):
    copy = paths.models_dir() / "another-copy.gguf"
    copy.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(default_model_path, copy)
    app, seen = make_app()
    async with app.run_test(size=WIDE, message_hook=seen) as pilot:
        await send(pilot, "Name a colour.", seen)
        app.models_ui.chosen(str(copy))  # as the model picker does
        await next_of(pilot, seen, ModelSwitched, 0, "model")
        assert app.engine.summary.path == str(copy.resolve()) or app.engine.summary.path.endswith(copy.name)
        assert_one_truth(app)  # an empty cache for the same branch: every panel says so
        assert app.branch.figures.cells == 0 and app.branch.figures.tokens > 0
        await send(pilot, "Name a fruit.", seen)
        assert_one_truth(app)
