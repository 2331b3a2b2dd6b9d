"""A reply's thought is kept apart from its answer: schema 5's migration of a database schema 4
wrote, a save and a load, and the exports (JSON field, Markdown <details> block)."""

import json

from chatapp.engine.chat.tree import MessageTree
from chatapp.engine.events import Message
from chatapp.engine.sessions.export import session_data, to_markdown
from chatapp.engine.sessions.store import ModelIdentity, SessionStore, Snapshot
from tests.engine.sessions.session_helpers import migrated_copy

MODEL = ModelIdentity("m", "/m.gguf", "ab" * 32, "Q4_1")


def test_schema_4_database_gets_its_raw_thoughts_moved_apart_and_loses_nothing(tmp_path):
    """Written by chatapp's schema 4 (tests/data/sessions/make_schema4.py, run on the commit before thoughts)."""
    store = migrated_copy(4, tmp_path, "idx, role, id, parent, stopped")
    work = store.get("work")
    thought, plain = [m for m in work.tree if m.role == "assistant"]
    assert (thought.thinking, thought.content) == ("\nThey ask about caches.\n", "Keys and values kept.")
    assert (plain.thinking, plain.content) == ("", "The keys and values of past tokens.")
    assert work.leaf == plain.id and [i for i, _ in store.turn_records("work")] == [3]


def test_a_thought_is_saved_loaded_and_exported_apart_from_the_answer(tmp_path):
    store = SessionStore.open(tmp_path)
    tree = MessageTree()
    question = tree.add(Message("user", "Why is the sky blue?"), None)
    reply = tree.add(Message("assistant", "Rayleigh scattering.", thinking="\nShort light scatters more.\n"),
                     question.id)
    store.save(Snapshot("sky", MODEL, [Message("system", "sys"), *tree.messages()], 1, 0, leaf=reply.id))
    loaded = store.get("sky").messages[-1]
    assert (loaded.content, loaded.thinking) == ("Rayleigh scattering.", "\nShort light scatters more.\n")
    data = session_data(store, "sky")
    exported = data["messages"][-1]
    assert (exported["content"], exported["thinking"]) == ("Rayleigh scattering.", "\nShort light scatters more.\n")
    assert "thinking" not in data["messages"][1]
    json.dumps(data)
    markdown = to_markdown(data)
    block = "<details>\n<summary>Thinking</summary>\n\nShort light scatters more.\n\n</details>\n\nRayleigh scattering."
    assert block in markdown
