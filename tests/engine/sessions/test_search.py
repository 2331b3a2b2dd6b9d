"""Full-text search over every saved message: the index schema 8 adds (migrated from a database
schema 7 wrote), kept in step by its triggers through saves, a deleted branch, a deleted
session, a dropped index and kill -9; and a hit in a branch not shown opening that branch with
its kept KV state, on the real default model."""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import sys
import time
import os
from pathlib import Path

import pytest

from chatapp.engine.chat.tree import MessageTree
from chatapp.engine.events import Message
from chatapp.engine.sessions.manager import SessionManager
from chatapp.engine.sessions.search import SearchQueryError, search
from chatapp.engine.sessions.store import DB_NAME, ModelIdentity, SessionStore, Snapshot
from tests.engine.sessions.session_helpers import (SETTINGS, migrated_copy, open_engine, run_turn,
                                                    search_index_disagreements)

SAVER = Path(__file__).with_name("session_saver.py")
MODEL = ModelIdentity("m", "/models/m.gguf", "ab" * 32, "Q4_1")


@pytest.fixture(scope="module")
def engine(default_model_path):
    engine = open_engine(default_model_path)
    yield engine
    engine.close()


def found(store: SessionStore, query: str) -> list[tuple[str, str]]:
    return [(hit.session, hit.snippet.strip()) for hit in search(store, query)]


def test_a_database_schema_7_wrote_is_indexed_in_every_branch_thought_tool_result_and_file_name(tmp_path):
    store = migrated_copy(7, tmp_path)
    assert search_index_disagreements(store.path) == []
    walrus = search(store, "walrus")  # newest first: the session saved after "harbour" comes first
    assert [(h.session, h.role) for h in walrus] == [("doomed", "assistant"), ("doomed", "user"),
                                                     ("harbour", "assistant")]
    thought = walrus[2]  # in a thought, on the branch not shown: its own reply is what opens it
    assert not thought.active and thought.leaf == thought.message_id
    assert [text for text, matched in thought.parts if matched] == ["walrus"]
    # each hit says what of its message matched (issue 56): the text, the thought, a file's name
    assert [h.field for h in walrus] == ["text", "text", "thought"] and thought.where == " · in its thought"
    (tool,) = search(store, "marmalade")
    assert tool.role == "tool" and tool.active and tool.field == "text" and tool.where == ""
    (question,) = search(store, "files:notes")  # "notes" is in its retrieved block's file name alone
    assert question.role == "user" and question.snippet == "harbour-notes.txt" and question.field == "file"
    assert {h.role for h in search(store, "notes")} == {"user", "assistant"}  # and in a thought
    assert found(store, "lighthouse") == [("harbour", "At six, says the lighthouse keeper.")]
    assert found(store, "concise") == []  # the system prompt is outside the tree, and outside the index


def test_a_deleted_session_and_a_deleted_branch_leave_the_index_with_their_rows(tmp_path):
    store = migrated_copy(7, tmp_path)
    store.delete("doomed")
    assert [h.session for h in search(store, "walrus")] == ["harbour"]
    stored = store.get("harbour")
    tree = MessageTree.from_messages(stored.tree[1:], stored.leaf)
    (thought_reply,) = [m for m in tree.messages() if "lighthouse" in m.content]
    tree.remove(thought_reply.id)
    store.save(Snapshot("harbour", MODEL, [stored.tree[0], *tree.messages()], 1, 50, leaf=tree.leaf),
               base=stored.revision, seen=frozenset(m.id for m in stored.tree if m.id))
    assert search(store, "walrus") == [] and search(store, "lighthouse") == []
    assert found(store, "marmalade") == [("harbour", "tide: low water at noon, marmalade sky")]
    assert search_index_disagreements(store.path) == []


def test_an_edited_reply_is_found_by_its_new_words_only_and_a_resave_indexes_nothing_twice(tmp_path):
    store = SessionStore.open(tmp_path)
    first = [Message("system", "sys"), Message("user", "Name a bird."), Message("assistant", "A puffin.")]
    saved = store.save(Snapshot("s", MODEL, first, 1, 10))
    tree = MessageTree.from_messages(store.get("s").tree[1:], saved.leaf)
    again = store.save(Snapshot("s", MODEL, [first[0], *tree.messages()], 1, 10), base=saved.revision,
                       seen=saved.ids)  # the same transcript: every row rewritten, none changed
    reply = tree[saved.leaf]
    tree.update(reply.id, Message("assistant", "A kestrel."))
    store.save(Snapshot("s", MODEL, [first[0], *tree.messages()], 1, 10), base=again.revision, seen=again.ids)
    assert search(store, "puffin") == [] and found(store, "kestrel") == [("s", "A kestrel.")]
    assert search_index_disagreements(store.path) == []


def test_an_index_dropped_by_hand_is_built_again_when_the_database_is_next_opened(tmp_path):
    store = migrated_copy(7, tmp_path)
    with sqlite3.connect(store.path) as conn:
        conn.execute("DROP TRIGGER message_text_delete")  # a lone trigger gone would leave rows behind
        conn.execute("DROP TABLE message_text")
    store = SessionStore.open(tmp_path, create=False)  # as `chatapp sessions search` opens it
    assert search_index_disagreements(store.path) == []
    store.delete("doomed")
    assert [h.session for h in search(store, "walrus")] == ["harbour"]


@pytest.mark.parametrize("query", ['"', "AND", "walrus OR", "*", "nowhere:walrus", "NEAR(", "  "])
def test_a_query_fts5_cannot_read_is_one_line_that_names_it(tmp_path, query):
    store = migrated_copy(7, tmp_path)
    with pytest.raises(SearchQueryError) as raised:
        search(store, query)
    assert "\n" not in raised.value.one_line() and raised.value.one_line().startswith("Search: ")


def test_a_word_on_a_branch_not_shown_opens_that_branch_with_its_kept_state(engine, tmp_path):
    manager = SessionManager.open(SETTINGS, tmp_path)
    engine.new_chat()
    engine.clear_cache()
    live = manager.resume("s", engine)
    live.save_turn(live.annotate(run_turn(engine, "Say hello.")))
    fork = engine.leaf
    live.save_turn(live.annotate(run_turn(engine, "Is the quokkaberry a fruit?")))
    hidden, hidden_path = engine.leaf, engine.messages
    live.save_turn(live.annotate(list(engine.send_after(fork, "Name a colour."))[-1].record))
    assert engine.leaf != hidden
    hits = search(manager.store, "quokkaberry")
    assert "user" in {h.role for h in hits}  # the reply may say it too: every hit opens that branch
    assert all(h.leaf == hidden and not h.active for h in hits), hits
    manager.store.set_leaf("s", hits[0].leaf)  # what `chatapp sessions checkout s LEAF` does
    engine.new_chat()
    engine.clear_cache()
    reopened = manager.resume("s", engine)
    assert engine.leaf == hidden and engine.messages == hidden_path
    assert reopened.report.restored_tokens > 0, reopened.report.fallback
    assert len(engine.prompt_ids(add_generation_prompt=False)) > 60  # what an open without its state prefills
    assert run_turn(engine, "And its colour?").prefill_tokens < 30


def test_kill_9_as_a_turn_is_saved_leaves_the_index_equal_to_the_messages(tmp_path):
    """The saver (session_saver.py, "grow") runs a real turn, then saves, over and over; the kill
    comes as the third save begins (tests/cli/test_sessions_search_cli.py kills one mid-decode)."""
    directory = tmp_path / "sessions"
    proc = subprocess.Popen([sys.executable, str(SAVER), str(directory), "g", "grow", "4", "0", "0", "grow"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=os.environ.copy())
    try:
        deadline = time.monotonic() + 600  # each save follows a turn: minutes on a loaded machine
        while not (line := proc.stdout.readline()).startswith("begin 3"):
            if not line or time.monotonic() > deadline:
                pytest.fail(f"the saver never began its third save: {proc.poll()} {proc.stderr.read()}")
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        proc.stdout.close()
        proc.stderr.close()
    store = SessionStore.open(directory)
    assert len(store.get("g").tree) >= 1 + 2 * (4 + 2)  # the turns saved before the kill
    assert search_index_disagreements(directory / DB_NAME) == []
    questions = {m.id for m in store.get("g").tree if m.role == "user"}
    assert {h.message_id for h in search(store, "grow", limit=1000)} >= questions
