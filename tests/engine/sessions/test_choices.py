"""What the user chose for a session (schema 7): its thinking mode and tool choice, kept with it,
exported with it, and read back whole or not at all."""

from __future__ import annotations

import sqlite3

import pytest

from chatapp.engine.sessions.choices import SessionChoices
from chatapp.engine.sessions.export import session_data, to_markdown
from chatapp.engine.sessions.store import DB_NAME, SessionStore
from chatapp.errors import SessionError
from tests.engine.sessions.session_helpers import migrated_copy, saved

def test_choices_are_kept_replaced_and_exported(tmp_path):
    store = SessionStore.open(tmp_path)
    saved(store)
    assert store.choices("s") == SessionChoices() and store.choices("none") == SessionChoices()
    store.set_choices("s", SessionChoices(think="off"))
    store.set_choices("s", SessionChoices(think="512", tools="auto"))
    saved(store)  # a save of the tree leaves them alone
    assert store.choices("s") == SessionChoices(think="512", tools="auto")
    data = session_data(store, "s")
    assert data["choices"] == {"think": "512", "tools": "auto"}
    assert "Thinking: 512 · Tools: auto" in to_markdown(data)
    with pytest.raises(SessionError):
        store.set_choices("none", SessionChoices(think="on"))


@pytest.mark.parametrize("kept", ["not json", "[1, 2]", '{"think": 5, "tools": "auto"}',
                                  '{"think": "' + "x" * 500 + '"}'])
def test_choices_that_cannot_be_read_cost_the_choice_not_the_session(tmp_path, kept):
    store = SessionStore.open(tmp_path)
    saved(store)
    with sqlite3.connect(tmp_path / DB_NAME) as conn:
        conn.execute("UPDATE sessions SET choices = ?", (kept,))
    chosen = store.choices("s")
    assert chosen.think == "" and chosen.tools in ("", "auto")
    assert store.get("s").name == "s"


def test_a_schema_6_database_gains_choices_and_loses_nothing(tmp_path):
    """Written by chatapp's schema 6 (tests/data/sessions/make_schema6.py, run on 1f1d612, before choices)."""
    store = migrated_copy(6, tmp_path)
    work = store.get("work")
    plain = [m for m in work.tree if m.role == "assistant"][1]
    assert store.draft("work") == "and how big is it" and store.scores("work") == {plain.id: '[{"id": 1}]'}
    assert store.choices("work") == SessionChoices()
    store.set_choices("work", SessionChoices(think="off"))
    assert store.choices("work").think == "off"
