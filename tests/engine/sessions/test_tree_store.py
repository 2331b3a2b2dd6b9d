"""Sessions keep trees: schema 4's migration of a schema-3 database, and saves that merge branches."""

import shutil
import sqlite3
import threading
from pathlib import Path

import pytest

from chatapp.engine.chat.tree import MessageTree, is_id
from chatapp.engine.events import Message
from chatapp.engine.sessions.schema import SCHEMA_VERSION
from chatapp.engine.sessions.store import DB_NAME, ModelIdentity, SessionStore, Snapshot, TurnRow
from chatapp.errors import SessionConflict

SCHEMA3 = Path(__file__).parents[2] / "data" / "sessions" / "schema3.db"
"""Written by chatapp's schema 3 (tests/data/sessions/make_schema3.py, run on the commit before trees)."""
MODEL = ModelIdentity("m", "/m.gguf", "ab" * 32, "Q4_1")


def test_schema_3_database_becomes_one_path_per_session_with_nothing_lost(tmp_path):
    shutil.copy(SCHEMA3, tmp_path / DB_NAME)
    with sqlite3.connect(tmp_path / DB_NAME) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == 3
        before = conn.execute("SELECT session_id, idx, role, content, stopped FROM messages ORDER BY 1, 2").fetchall()
        turns_before = conn.execute("SELECT session_id, message_idx, record FROM turns ORDER BY 1, 2").fetchall()
    store = SessionStore.open(tmp_path)
    with sqlite3.connect(tmp_path / DB_NAME) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION >= 4
        after = conn.execute("SELECT session_id, idx, role, content, stopped FROM messages ORDER BY 1, 2").fetchall()
        turns = conn.execute("SELECT t.session_id, t.message_idx, t.record, m.idx FROM turns t"
                             " JOIN messages m ON m.session_id = t.session_id AND m.id = t.message_id").fetchall()
    assert after == before
    assert [(s, i, r) for s, i, r, _ in turns] == turns_before and all(i == m for _, i, _, m in turns)
    work = store.get("work")
    assert [m.content for m in work.messages][1:] == ["What is a KV cache?", work.messages[2].content,
                                                      "And prefill?", "Computing the prompt's tokens in parallel."]
    assert work.messages[-1].stopped and work.messages[0].role == "system"
    path = work.messages[1:]
    assert all(is_id(m.id) for m in path) and path[0].parent is None
    assert [m.parent for m in path[1:]] == [m.id for m in path[:-1]] and work.leaf == path[-1].id
    assert [m.content for m in store.get("no system").messages] == ["hi", "hello"]
    assert [m.role for m in store.get("empty").messages] == ["system"] and store.get("empty").leaf is None
    assert [i for i, _ in store.turn_records("work")] == [2, 4]


def tree_of(*spec: tuple[str, str, str | None]) -> tuple[MessageTree, dict[str, str]]:
    tree, ids = MessageTree(), {}
    for name, role, parent in spec:
        ids[name] = tree.add(Message(role, name), ids.get(parent) if parent else None).id
    return tree, ids


def snap(tree: MessageTree, name: str = "s") -> Snapshot:
    return Snapshot(name, MODEL, [Message("system", "sys"), *tree.messages()], 1, 0, (), tree.leaf)


def test_a_tree_round_trips_with_its_active_leaf_and_a_deleted_branch_is_deleted(tmp_path):
    store = SessionStore.open(tmp_path)
    tree, ids = tree_of(("q1", "user", None), ("a1", "assistant", "q1"), ("a1b", "assistant", "q1"))
    tree.switch(ids["a1"])
    saved = store.save(snap(tree), TurnRow(0, "CPU", 1, 1.0, {"n": 1}, ids["a1b"]))
    loaded = store.get("s")
    assert [(m.id, m.parent, m.content) for m in loaded.tree[1:]] == [(m.id, m.parent, m.content)
                                                                      for m in tree.messages()]
    assert loaded.leaf == ids["a1"] and [m.content for m in loaded.messages] == ["sys", "q1", "a1"]
    tree.remove(ids["a1b"])
    store.save(snap(tree), base=saved.revision, seen=saved.ids)
    assert {m.content for m in store.get("s").tree} == {"sys", "q1", "a1"} and store.turn_records("s") == []


def test_two_writers_on_different_branches_both_keep_their_turns_and_on_one_leaf_the_second_is_refused(tmp_path):
    store = SessionStore.open(tmp_path)
    tree, ids = tree_of(("q1", "user", None), ("a1", "assistant", "q1"), ("a1b", "assistant", "q1"))
    first = store.save(snap(tree))
    mine, theirs = MessageTree.from_messages(tree.messages()), MessageTree.from_messages(tree.messages())
    mine.add(Message("user", "mine"), ids["a1"])
    theirs.add(Message("user", "theirs"), ids["a1b"])
    store.save(snap(theirs), base=first.revision, seen=first.ids)
    merged = store.save(snap(mine), base=first.revision, seen=first.ids)
    assert merged.appended and {m.content for m in store.get("s").tree} >= {"mine", "theirs", "a1", "a1b"}
    third = MessageTree.from_messages(tree.messages())
    third.add(Message("user", "also after a1"), ids["a1"])
    with pytest.raises(SessionConflict, match="changed by another process"):
        store.save(snap(third), base=first.revision, seen=first.ids)
    assert "also after a1" not in {m.content for m in store.get("s").tree}


def test_two_writers_branching_on_purpose_after_one_message_are_both_kept_and_a_plain_continuation_is_not(tmp_path):
    """Siblings cannot conflict: a writer whose new message starts a branch on purpose (`branched`:
    ask --branch-from, an edit, a regenerate) is saved beside another's messages at that place."""
    store = SessionStore.open(tmp_path)
    tree, ids = tree_of(("q1", "user", None), ("a1", "assistant", "q1"))
    first = store.save(snap(tree))
    mine, theirs, plain = (MessageTree.from_messages(tree.messages()) for _ in range(3))
    theirs.add(Message("user", "theirs"), ids["a1"])
    store.save(snap(theirs), base=first.revision, seen=first.ids)
    branch = mine.add(Message("user", "mine"), ids["a1"])
    mine.add(Message("assistant", "my reply"), branch.id)
    merged = store.save(snap(mine), base=first.revision, seen=first.ids, branched=frozenset({branch.id}))
    stored = store.get("s")
    assert merged.appended and [m.content for m in stored.tree if m.parent == ids["a1"]] == ["theirs", "mine"]
    assert stored.leaf == mine.leaf
    plain.add(Message("user", "also after a1"), ids["a1"])
    with pytest.raises(SessionConflict, match="changed by another process"):
        store.save(snap(plain), base=first.revision, seen=first.ids)


def test_four_concurrent_writers_on_two_branches(tmp_path):
    """Two writers per branch, each adding turns after its own leaf: on each branch the first
    writer wins every save, the second is refused (it never saw the first's turns), and
    nothing either winner wrote is lost."""
    store = SessionStore.open(tmp_path)
    tree, ids = tree_of(("q1", "user", None), ("left", "assistant", "q1"), ("right", "assistant", "q1"))
    start = store.save(snap(tree))
    outcomes: dict[str, list[str]] = {}
    go = threading.Barrier(4)

    def writer(tag: str, branch: str) -> None:
        own = MessageTree.from_messages(tree.messages())
        base, seen, results = start.revision, start.ids, []
        leaf = ids[branch]
        go.wait()
        for i in range(8):
            question = own.add(Message("user", f"{tag}{i}"), leaf)
            leaf = own.add(Message("assistant", f"{tag}{i} reply"), question.id).id
            try:
                saved = store.save(snap(own), base=base, seen=seen)
                base, seen = saved.revision, saved.ids
                results.append("saved")
            except SessionConflict:
                results.append("refused")
                own.remove(question.id)
                leaf = own[own.leaf].id if own.leaf else ids[branch]
        outcomes[tag] = results

    threads = [threading.Thread(target=writer, args=(tag, branch))
               for tag, branch in (("L1", "left"), ("L2", "left"), ("R1", "right"), ("R2", "right"))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    stored = {m.content for m in store.get("s").tree}
    for pair in (("L1", "L2"), ("R1", "R2")):
        winners = [tag for tag in pair if "saved" in outcomes[tag]]
        assert winners, outcomes
        for tag in winners:  # every turn a writer was told was saved is in the database
            saved_turns = [i for i, result in enumerate(outcomes[tag]) if result == "saved"]
            assert {f"{tag}{i}" for i in saved_turns} <= stored
    assert {"left", "right"} <= stored
    assert any("saved" in outcomes[t] for t in ("L1", "L2")) and any("saved" in outcomes[t] for t in ("R1", "R2"))


@pytest.mark.parametrize("column, value", [
    ("active_leaf", "../../evil"), ("active_leaf", 42), ("active_leaf", "ffffffff"),
    ("parent", "not an id"), ("id", None), ("id", "../x"), ("parent", "LATER"),
])
def test_an_edited_tree_loads_every_message_with_a_path_that_exists(tmp_path, column, value):
    store = SessionStore.open(tmp_path)
    tree, ids = tree_of(("q1", "user", None), ("a1", "assistant", "q1"), ("q2", "user", "a1"))
    store.save(snap(tree))
    with sqlite3.connect(tmp_path / DB_NAME) as conn:
        if column == "active_leaf":
            conn.execute("UPDATE sessions SET active_leaf = ?", (value,))
        elif value == "LATER":  # a parent written after its child: a cycle if followed
            conn.execute("UPDATE messages SET parent = ? WHERE id = ?", (ids["q2"], ids["q1"]))
        else:
            conn.execute(f"UPDATE messages SET {column} = ? WHERE id = ?", (value, ids["a1"]))
    loaded = store.get("s")
    assert {m.content for m in loaded.tree} == {"sys", "q1", "a1", "q2"}
    assert loaded.messages[-1].id == loaded.leaf and loaded.messages[0].role == "system"
    MessageTree.from_messages(loaded.tree, loaded.leaf).path()  # a path that ends


def test_a_message_whose_id_was_edited_away_is_saved_once_under_a_new_one(tmp_path):
    store = SessionStore.open(tmp_path)
    tree, ids = tree_of(("q1", "user", None), ("a1", "assistant", "q1"))
    store.save(snap(tree))
    with sqlite3.connect(tmp_path / DB_NAME) as conn:
        conn.execute("UPDATE messages SET id = NULL WHERE id = ?", (ids["a1"],))
    loaded = store.get("s")
    again = MessageTree.from_messages(loaded.tree, loaded.leaf)
    for _ in range(2):
        store.save(snap(again), base=store.get("s").revision, seen=frozenset(m.id for m in loaded.tree if m.id))
    assert sorted(m.content for m in store.get("s").tree) == ["a1", "q1", "sys"]
