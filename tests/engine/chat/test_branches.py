"""Branches on the real model: an edit prefills only past the common prefix, a regenerate keeps the
old reply, and switching branches restores the kept KV state instead of prefilling again."""

from __future__ import annotations

import pytest

from chatapp.config import Settings
from chatapp.engine.chat.engine import Engine
from chatapp.engine.chat.tree import ROOT
from chatapp.engine.local.backend import LocalBackend
from chatapp.engine.local.llama import LlamaRuntime, LoadOptions
from chatapp.engine.tokens import common_prefix
from chatapp.errors import InputError

THREADS = 2  # greedy replies repeat only with a fixed thread count


def engine_for(model_path, branch_state_mb: int = 256, n_ctx: int = 2048) -> Engine:
    settings = Settings(n_ctx=n_ctx, temperature=0.0, max_tokens=24, threads=THREADS,
                        system_prompt="You are a concise assistant.", branch_state_mb=branch_state_mb)
    runtime = LlamaRuntime(model_path, LoadOptions(n_ctx=n_ctx, n_threads=THREADS))
    return Engine(LocalBackend(runtime), settings)


@pytest.fixture
def engine(default_model_path):
    engine = engine_for(default_model_path)
    yield engine
    engine.close()


def turn(events):
    return list(events)[-1].record


def test_editing_an_earlier_question_prefills_only_past_the_common_prefix_and_keeps_the_old_branch(engine):
    turn(engine.send("Name a fruit."))
    first_reply = engine.messages[-1]
    turn(engine.send("Name a colour."))
    turn(engine.send("Name a planet."))
    before_edit = engine.messages
    old_prompt = engine.prompt_ids(add_generation_prompt=False)
    record = turn(engine.edit(engine.messages[3].id, "Name a vegetable."))  # the 2nd question
    new_prompt = engine.prompt_ids(before_edit[:3] + [engine.messages[3]])
    shared = common_prefix(old_prompt, new_prompt)
    assert record.cached_tokens == shared and record.prefill_tokens == len(new_prompt) - shared
    assert record.prompt_tokens == len(new_prompt) and record.extra["action"] == "edit"
    assert record.extra["branch"] == "2/2" and record.extra["parent_id"] == engine.messages[3].id
    assert [m.content for m in engine.messages[1:4]] == ["Name a fruit.", first_reply.content, "Name a vegetable."]
    tree = engine.tree
    assert len(tree) == 8 and len(tree.children(first_reply.id)) == 2  # the old branch is still there


def test_regenerate_keeps_the_old_reply_and_switching_back_restores_its_cache(engine):
    first = turn(engine.send("Say hello."))
    old_reply = engine.messages[-1]
    again = turn(engine.regenerate())
    assert engine.messages[-1].id != old_reply.id and old_reply.id in engine.tree
    assert again.extra["branch"] == "2/2" and again.extra["action"] == "regenerate"
    assert again.reply == first.reply  # greedy, the same prefill: the same reply
    same = engine.sibling(engine.messages[-1].id, -1)  # the cache already holds this very path
    assert engine.messages[-1].id == old_reply.id and same.how == "kept"
    assert same.prefill_next <= 2  # only the reply's end-of-turn marker, which decoding never evaluates
    turn(engine.edit(engine.messages[1].id, "Say goodbye."))  # another path, another cache
    switch = engine.switch(old_reply.id)
    assert switch.how == "restored" and switch.source == "memory" and switch.position == 1
    expected = engine.prompt_ids(add_generation_prompt=False)
    assert switch.tokens == common_prefix(engine.cached_tokens(), expected) > 0
    nxt = turn(engine.send("And goodbye?"))
    assert nxt.cached_tokens >= switch.tokens and nxt.prefill_tokens < 30
    assert "restored branch 1/2" in switch.describe()


def test_a_branch_continued_after_switching_away_and_back_gives_the_reply_it_gives_when_never_left(
        default_model_path):
    stay = engine_for(default_model_path)
    turn(stay.send("Count to three."))
    turn(stay.send("Now count to five."))
    reference = turn(stay.send("And to seven?")).reply
    stay.close()

    roam = engine_for(default_model_path)
    turn(roam.send("Count to three."))
    turn(roam.send("Now count to five."))
    leaf = roam.leaf
    turn(roam.edit(roam.messages[3].id, "Tell me a colour."))  # another branch, with its own cache
    roam.switch(leaf)
    assert turn(roam.send("And to seven?")).reply == reference
    roam.close()


def test_without_a_kept_state_a_switch_keeps_the_common_prefix_and_says_so(default_model_path):
    engine = engine_for(default_model_path, branch_state_mb=0)
    turn(engine.send("Name a fruit."))
    leaf = engine.leaf
    turn(engine.edit(engine.messages[1].id, "Name a colour."))
    switch = engine.switch(leaf)
    assert switch.how == "kept" and switch.prefill_next > 0
    assert switch.tokens == common_prefix(engine.cached_tokens(), engine.prompt_ids(add_generation_prompt=False))
    nxt = turn(engine.send("Another?"))
    assert nxt.cached_tokens == switch.tokens  # the next turn prefills the rest
    engine.close()


def test_states_past_the_memory_budget_are_evicted_least_recently_used_first(default_model_path):
    engine = engine_for(default_model_path, branch_state_mb=1)  # about 40 tokens of f16 cache
    turn(engine.send("Name a fruit."))
    first = engine.leaf
    turn(engine.edit(engine.messages[1].id, "Name a colour."))
    switch = engine.switch(first)
    assert switch.how == "kept"  # its state did not fit the budget: nothing to restore
    engine.close()


def test_branching_after_a_reply_and_deleting_a_branch(engine):
    turn(engine.send("Name a fruit."))
    reply = engine.messages[-1].id
    turn(engine.send("Name a colour."))
    record = turn(engine.send_after(reply, "Name a planet."))
    assert record.extra["action"] == "branch" and engine.messages[-2].content == "Name a planet."
    with pytest.raises(InputError, match="a branch starts after a reply"):
        engine.send_after(engine.messages[1].id, "x")
    with pytest.raises(InputError, match="no message with id"):
        engine.switch("ffffffff")
    removed = engine.delete_branch(engine.messages[-2].id)
    assert [m.content for m in removed][0] == "Name a planet."
    assert engine.messages[-2].content == "Name a colour."  # the path moved to the remaining sibling
    turn(engine.send_after(ROOT, "A new first question."))
    assert engine.messages[1].content == "A new first question." and len(engine.tree.children(None)) == 2


def test_a_branch_has_one_token_count_in_the_tree_the_switch_and_its_figures(engine):
    """The tree's count of a leaf, the switch's notice and the figures the panels draw agree."""
    turn(engine.send("Name a fruit."))
    turn(engine.send("Name a colour."))
    leaf = engine.leaf
    turn(engine.edit(engine.messages[3].id, "Name a planet."))
    away = engine.leaf
    counted = {name: engine.branch_tokens(name) for name in engine.tree.leaves()}
    switch = engine.switch(leaf)
    figures = engine.branch_figures()
    assert switch.figures == figures and figures.leaf == leaf
    assert figures.tokens == counted[leaf] == len(engine.prompt_ids(add_generation_prompt=False))
    assert figures.cells == len(engine.cached_tokens()) and figures.cached == switch.tokens
    assert f"({figures.tokens:,} tokens)" in switch.describe()
    assert figures.to_prefill == switch.prefill_next <= 2  # the reply's end marker, never evaluated
    back = engine.switch(away)
    assert back.figures.tokens == counted[away]


def test_a_jump_to_a_leaf_below_a_fork_names_the_fork(engine):
    """A jump from the tree to the leaf under a ‹ 2/2 › reply is "branch 2/2", not 1/1."""
    turn(engine.send("Name a fruit."))
    first_leaf = engine.leaf
    turn(engine.regenerate())
    turn(engine.send("Why that one?"))
    second_leaf = engine.leaf
    engine.switch(first_leaf)
    jump = engine.switch(second_leaf)
    assert (jump.position, jump.siblings) == (2, 2) and "branch 2/2" in jump.describe()
