"""KV states on disk: one per leaf, nothing of a deleted branch or of unsent text, eviction that
spares another session's only state, and a branch continued from the kept state nearest to it.
All on the real default model, with the state files measured in this test's own folder."""

from __future__ import annotations

import threading

import pytest

from chatapp.config import Settings
from chatapp.engine.sessions.manager import MIB, SessionManager
from chatapp.engine.sessions.statefile import SUFFIX, read_state
from chatapp.engine.tokens import common_prefix
from chatapp.engine.sessions.manager import LiveSession
from tests.engine.sessions.session_helpers import SETTINGS, open_engine, prefill_history, run_turn, synthetic_history


@pytest.fixture(scope="module")
def engine(default_model_path):
    engine = open_engine(default_model_path)
    yield engine
    engine.close()


def files(manager: SessionManager, name: str) -> dict[str, int]:
    """The session's state files: leaf id (or "") -> bytes."""
    key = manager.store.get(name).state_key
    return {p.name.removesuffix(SUFFIX).removeprefix(key).lstrip("-"): p.stat().st_size
            for p in manager.state_paths(key)}


def test_linear_turns_keep_one_state_for_the_one_leaf(engine, tmp_path):
    manager = SessionManager.open(SETTINGS, tmp_path)
    engine.new_chat()
    engine.clear_cache()
    live = manager.resume("s", engine)
    for i in range(4):
        live.save_turn(live.annotate(run_turn(engine, f"Say the number {i}.")))
    kept = files(manager, "s")
    assert list(kept) == [engine.leaf], kept  # today: one per reply, each larger than the last
    assert sum(kept.values()) == max(kept.values())


def test_a_deleted_branch_leaves_no_state_file(engine, tmp_path):
    manager = SessionManager.open(SETTINGS, tmp_path)
    engine.new_chat()
    engine.clear_cache()
    live = manager.resume("s", engine)
    live.save_turn(live.annotate(run_turn(engine, "Say hello.")))
    old = engine.leaf
    live.save_turn(live.annotate(list(engine.regenerate())[-1].record))
    assert set(files(manager, "s")) == {old, engine.leaf}  # two leaves, two states
    engine.delete_branch(old)
    assert old in files(manager, "s")  # the database holds the branch until a save deletes it
    live.save_now()
    assert set(files(manager, "s")) == {engine.leaf}


def test_text_typed_but_never_sent_is_not_saved_in_the_state(default_model_path, tmp_path, quiet_machine):
    engine = open_engine(default_model_path)
    engine.settings = engine.settings.replace(prefill_while_typing=True)
    try:
        manager = SessionManager.open(SETTINGS, tmp_path)
        live = manager.resume("s", engine)
        live.save_turn(live.annotate(run_turn(engine, "Name a fruit.")))
        secret = "my secret unsent draft about the quarterly numbers " * 4
        list(engine.type_ahead(secret, threading.Event()))
        figures = engine.branch_figures()
        assert engine.kv_used() > figures.cached  # typing filled cells past the path
        live.save_now(force=True)
        state = read_state(manager.active_state_path(manager.store.get("s")))
        assert len(state.tokens) <= figures.cached, (len(state.tokens), figures.cached)
        assert "secret" not in "".join(t.piece for t in engine.describe(state.tokens))
        # the session still resumes from it
        again = open_engine(default_model_path)
        try:
            assert manager.resume("s", again).report.restored_tokens == len(state.tokens)
        finally:
            again.close()
    finally:
        engine.close()


def test_eviction_spares_another_sessions_only_state(engine, tmp_path):
    probe = SessionManager.open(SETTINGS, tmp_path / "probe")
    engine.new_chat()
    engine.clear_cache()
    live = probe.resume("p", engine)
    for i in range(4):
        live.save_turn(live.annotate(run_turn(engine, f"Count to {i + 1}.")))
    final = probe.state_size(probe.store.get("p").state_key)
    assert final

    manager = SessionManager.open(SETTINGS, tmp_path / "sessions")
    engine.new_chat()
    engine.clear_cache()
    other = manager.resume("other", engine)
    other.save_turn(other.annotate(run_turn(engine, "Name a fruit.")))
    other_size = manager.state_size(manager.store.get("other").state_key)
    manager.cap_bytes = other_size + int(1.5 * final)
    engine.new_chat()
    engine.clear_cache()
    live = manager.resume("long", engine)
    for i in range(4):
        live.save_turn(live.annotate(run_turn(engine, f"Count to {i + 1}.")))
    assert manager.state_size(manager.store.get("other").state_key) == other_size
    assert list(files(manager, "long")) == [engine.leaf]


def test_eviction_takes_a_sessions_extra_states_before_another_sessions_only_one(engine, tmp_path):
    manager = SessionManager.open(Settings(), tmp_path)
    engine.new_chat()
    engine.clear_cache()
    only = manager.resume("only", engine)
    only.save_turn(only.annotate(run_turn(engine, "Name a fruit.")))
    engine.new_chat()
    engine.clear_cache()
    two = manager.resume("two", engine)
    two.save_turn(two.annotate(run_turn(engine, "Name a colour.")))
    two.save_turn(two.annotate(list(engine.regenerate())[-1].record))  # two leaves, two states
    sizes = files(manager, "two")
    assert len(sizes) == 2
    only_size = manager.state_size(manager.store.get("only").state_key)
    manager.cap_bytes = only_size + sizes[engine.leaf] + MIB // 8
    two.save_now(force=True)  # over the cap: something must go, and "only" is the least recently used
    assert manager.state_size(manager.store.get("only").state_key) == only_size
    assert list(files(manager, "two")) == [engine.leaf]


def test_a_branch_from_a_kept_leaf_in_a_new_process_starts_from_that_leafs_state(default_model_path, tmp_path):
    engine = open_engine(default_model_path)
    manager = SessionManager.open(SETTINGS, tmp_path)
    try:
        live = manager.resume("s", engine)
        live.save_turn(live.annotate(run_turn(engine, "Name a fruit.")))
        first = engine.leaf
        live.save_turn(live.annotate(run_turn(engine, "Name a colour.")))
        kept = engine.leaf
        live.save_turn(live.annotate(list(engine.send_after(first, "Name a planet."))[-1].record))
        assert set(files(manager, "s")) == {kept, engine.leaf}
    finally:
        engine.close()
    fresh = open_engine(default_model_path)  # a new process: memory holds nothing
    try:
        live = manager.resume("s", fresh)
        assert live.report.restored_tokens
        kept_tokens = read_state(manager.state_path(manager.store.get("s").state_key, kept)).tokens
        record = list(fresh.send_after(kept, "Name a shape."))[-1].record
        prompt = fresh.prompt_ids(fresh.messages[:-1])
        assert record.cached_tokens == common_prefix(kept_tokens, prompt)  # today: only what the active leaf shares
        assert record.prefill_tokens < 20, record
    finally:
        fresh.close()


def test_a_process_that_built_the_same_transcript_apart_saves_its_state_under_the_stored_ids(engine, tmp_path):
    """Two processes that hold one transcript under their own ids (as the kill -9 savers do):
    the second's save stores its messages under the first's ids, and its state goes to the
    stored active leaf's file, never to a file the database names no message of."""
    manager = SessionManager.open(SETTINGS, tmp_path)
    prefill_history(engine, synthetic_history("apart", 3))
    first = LiveSession(manager, "s", engine)
    first.attach()
    first.save_now(force=True)
    stored_leaf = manager.store.get("s").leaf
    prefill_history(engine, synthetic_history("apart", 3))  # the same messages, new ids
    assert engine.leaf != stored_leaf
    second = LiveSession(manager, "s", engine)
    second.attach()
    report = second.save_now(force=True)
    assert report.state_bytes > 0 and manager.store.get("s").leaf == stored_leaf
    assert list(files(manager, "s")) == [stored_leaf]  # today: a second file, under the engine's own id
    assert second.kept_branches() == [engine.leaf]  # the engine finds it under the id it knows


def test_two_branches_from_one_reply_at_once_are_both_saved_with_their_states(default_model_path, tmp_path):
    """Two processes branch after the same reply at once (ask --branch-from twice): the two new
    questions are siblings, which cannot conflict, so the second save keeps both."""
    manager = SessionManager.open(SETTINGS, tmp_path)
    one, two = open_engine(default_model_path), open_engine(default_model_path)
    try:
        live = manager.resume("s", one)
        live.save_turn(run_turn(one, "Name a fruit."))
        reply = one.leaf
        a, b = manager.resume("s", one), manager.resume("s", two)  # both open it before either branches
        a.save_turn(list(one.send_after(reply, "Name a colour."))[-1].record)
        b.save_turn(list(two.send_after(reply, "Name a planet."))[-1].record)  # today: SessionConflict
        stored = manager.store.get("s")
        assert [m.content for m in stored.tree if m.parent == reply] == ["Name a colour.", "Name a planet."]
        assert stored.leaf == two.leaf
        assert set(files(manager, "s")) == {one.leaf, two.leaf}  # each leaf its state, the reply's gone
    finally:
        one.close()
        two.close()
