"""The conversation tree as plain data: ids, siblings, the active path, last-viewed leaves."""

import pytest

from chatapp.engine.chat.tree import ROOT, MessageTree, is_id
from chatapp.engine.events import Message
from chatapp.errors import InputError


def build() -> tuple[MessageTree, dict[str, str]]:
    """q1 -> a1 -> q2 -> a2, then q2' (an edit of q2) -> a2', and a1' (a regenerate of a1)."""
    tree, ids = MessageTree(), {}
    for name, role, parent in (("q1", "user", None), ("a1", "assistant", "q1"), ("q2", "user", "a1"),
                               ("a2", "assistant", "q2"), ("q2'", "user", "a1"), ("a2'", "assistant", "q2'"),
                               ("a1'", "assistant", "q1")):
        ids[name] = tree.add(Message(role, name), ids.get(parent)).id
    return tree, ids


def contents(tree: MessageTree) -> list[str]:
    return [m.content for m in tree.path()]


def test_ids_are_short_unique_and_parents_link_the_path():
    tree, ids = build()
    assert all(is_id(i) for i in ids.values()) and len(set(ids.values())) == len(ids)
    assert contents(tree) == ["q1", "a1'"]  # the last message added is the active leaf
    assert tree.siblings(ids["a1'"]) == ([ids["a1"], ids["a1'"]], 1)
    assert [m.content for m in tree.children(ids["a1"])] == ["q2", "q2'"]


def test_switching_to_a_sibling_shows_the_leaf_last_viewed_inside_it():
    tree, ids = build()
    tree.switch(ids["a1"])
    assert contents(tree) == ["q1", "a1", "q2'", "a2'"]  # q2' was added last under a1
    tree.switch(ids["q2"])
    assert contents(tree) == ["q1", "a1", "q2", "a2"]
    tree.switch(ids["a1'"])
    tree.switch(ids["a1"])  # back: inside a1's subtree, q2's branch was the one last viewed
    assert contents(tree) == ["q1", "a1", "q2", "a2"]
    assert tree.switch(ids["q2"], descend=False) == ids["q2"] and contents(tree) == ["q1", "a1", "q2"]


def test_removing_a_branch_moves_the_path_to_a_sibling_or_the_parent():
    tree, ids = build()
    tree.switch(ids["a2"])
    removed = tree.remove(ids["q2"])
    assert {m.content for m in removed} == {"q2", "a2"} and ids["a2"] not in tree
    assert contents(tree) == ["q1", "a1", "q2'", "a2'"]
    tree.remove(ids["q2'"])
    assert contents(tree) == ["q1", "a1"]
    tree.remove(ids["q1"])
    assert contents(tree) == [] and len(tree) == 0 and tree.leaf is None


def test_a_linear_transcript_becomes_one_path_and_a_saved_tree_comes_back_whole():
    linear = [Message("system", "s"), Message("user", "q"), Message("assistant", "a")]
    tree = MessageTree.from_messages(linear)
    assert contents(tree) == ["q", "a"] and tree.path()[1].parent == tree.path()[0].id
    original, ids = build()
    again = MessageTree.from_messages(original.messages(), ids["a2"])
    assert contents(again) == ["q1", "a1", "q2", "a2"] and len(again) == len(original)
    assert [(m.id, m.parent) for m in again.messages()] == [(m.id, m.parent) for m in original.messages()]


def test_a_damaged_tree_keeps_every_message():
    orphan = Message("user", "lost parent", id="0badc0de", parent="deadbeef")
    twin = Message("assistant", "same id", id="0badc0de", parent="0badc0de")
    tree = MessageTree.from_messages([orphan, twin], "feedface")
    assert len(tree) == 2 and tree[tree.leaf].content == "same id"
    assert tree.path()[0].parent is None  # the orphan starts a branch of its own


def test_ids_resolve_by_unique_prefix_and_say_what_is_wrong():
    tree, ids = build()
    assert tree.resolve(ids["a2"][:6]) == ids["a2"] and tree.resolve(ids["a2"].upper()) == ids["a2"]
    with pytest.raises(InputError, match="too short"):
        tree.resolve("ab")
    with pytest.raises(InputError, match="no message with id"):
        tree.resolve("zzzzzzzz")
    crowded = MessageTree.from_messages([Message("user", str(i), id=f"abcd{i:04x}") for i in range(2)])
    with pytest.raises(InputError, match="ambiguous"):
        crowded.resolve("abcd")
    assert ROOT not in tree


def test_walk_lists_every_message_depth_first():
    tree, ids = build()
    walked = [(m.content, depth) for m, depth in tree.walk()]
    assert walked == [("q1", 0), ("a1", 1), ("q2", 2), ("a2", 3), ("q2'", 2), ("a2'", 3), ("a1'", 1)]
