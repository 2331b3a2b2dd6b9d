"""What a session keeps besides its tree (schema 6): the composer's unsent text as its draft, and
the probabilities of replies scored after they were written, by reply id."""

from __future__ import annotations


import pytest

from chatapp.engine.sessions.store import ModelIdentity, SessionStore
from chatapp.errors import SessionError
from tests.engine.sessions.session_helpers import migrated_copy, saved

MODEL = ModelIdentity("m", "/models/m.gguf", "ab" * 32, "Q4_1")


def test_a_draft_is_kept_until_it_is_replaced_and_goes_with_its_session(tmp_path):
    store = SessionStore.open(tmp_path)
    saved(store)
    assert store.draft("s") == "" and store.draft("none") == ""
    store.set_draft("s", "half a question")
    assert store.draft("s") == "half a question"
    saved(store)  # a save of the tree leaves the draft alone
    assert store.draft("s") == "half a question"
    store.set_draft("s", "")
    assert store.draft("s") == ""
    with pytest.raises(SessionError):
        store.set_draft("none", "text")


def test_scores_are_kept_by_reply_and_deleted_with_the_session(tmp_path):
    store = SessionStore.open(tmp_path)
    reply = saved(store)
    store.keep_scores("s", reply, '[{"id": 1}]')
    store.keep_scores("s", reply, '[{"id": 2}]')  # scored again: replaced
    assert store.scores("s") == {reply: '[{"id": 2}]'}
    store.delete("s")
    saved(store)
    assert store.scores("s") == {}


def test_a_schema_5_database_gains_drafts_and_scores_and_loses_nothing(tmp_path):
    """Written by chatapp's schema 5 (tests/data/sessions/make_schema5.py, run on 4fd3f70, before drafts and scores)."""
    store = migrated_copy(5, tmp_path)
    work = store.get("work")
    thought, plain = [m for m in work.tree if m.role == "assistant"]
    assert (thought.thinking, thought.content) == ("\nThey ask about caches.\n", "Keys and values kept.")
    assert work.leaf == plain.id and [i for i, _ in store.turn_records("work")] == [3]
    assert store.draft("work") == "" and store.scores("work") == {}
    store.set_draft("work", "half a question")
    store.keep_scores("work", plain.id, '[{"id": 1}]')
    assert store.draft("work") == "half a question" and store.scores("work") == {plain.id: '[{"id": 1}]'}
