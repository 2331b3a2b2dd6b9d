"""What a session keeps besides its tree (schema 6): the composer's unsent text as its draft, and
the probabilities of replies scored after they were written, by reply id."""

from __future__ import annotations

import pytest

from chatapp.engine.events import Message
from chatapp.engine.sessions.store import ModelIdentity, SessionStore, Snapshot
from chatapp.errors import SessionError

MODEL = ModelIdentity("m", "/models/m.gguf", "ab" * 32, "Q4_1")


def saved(store: SessionStore) -> str:
    """A session "s" with one question and its reply; the reply's id."""
    store.save(Snapshot("s", MODEL, [Message("user", "Hi."), Message("assistant", "Hello.")], 0, 10))
    return next(m.id for m in store.get("s").tree if m.role == "assistant")


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
