"""Earlier thoughts and the cache (issue 37, point 4), on the real default model given an
R1-shaped template (tests.gguf_copy): with "keep" the cache holds a prefix of the next prompt,
so a turn prefills only its question and the template's glue; with "template" the history is
rewritten, and what that costs is predicted before the turn as the turn then measures it."""

from __future__ import annotations

import pytest

from chatapp.config import Settings
from chatapp.engine.backend import GenerationSettings
from chatapp.engine.chat.engine import Engine
from chatapp.engine.local.backend import LocalBackend
from chatapp.engine.local.llama import LlamaRuntime, LoadOptions
from chatapp.engine.tokens import common_prefix
from tests.engine.chat.thinking_templates import R1_SHAPED
from tests.gguf_copy import copies_with_templates

QUESTIONS = ("What is the capital of France?", "And of Italy?", "Which of the two is bigger?",
             "Name a river in it.", "Thanks, that is all.")


@pytest.fixture(scope="module")
def r1_model(default_model_path, tmp_path_factory):
    path = tmp_path_factory.mktemp("thinking-history") / "r1-shaped.gguf"
    copies_with_templates(default_model_path, {path: R1_SHAPED})
    return path


@pytest.fixture
def engine_for(r1_model):
    opened = []

    def make(history: str) -> Engine:
        runtime = LlamaRuntime(r1_model, LoadOptions(n_ctx=2048))
        engine = Engine(LocalBackend(runtime), Settings(n_ctx=2048, system_prompt="You are a concise assistant.",
                                                        think_budget=8, thinking_history=history))
        engine.generation = GenerationSettings(temperature=0.0, max_tokens=32)
        opened.append(engine)
        return engine
    yield make
    for engine in opened:
        engine.close()


def test_keep_prefills_only_the_new_question_and_the_glue(engine_for):
    engine = engine_for("keep")
    for turn, question in enumerate(QUESTIONS):
        cached_before = len(engine.cached_tokens())
        record = list(engine.send(question))[-1].record
        assert record.thinking and record.extra["thinking_closed_by"] == "budget"
        if turn:  # the cache held the whole conversation so far: none of it is prefilled again
            assert record.cached_tokens == cached_before
            assert record.prefill_tokens == record.prompt_tokens - cached_before
            assert record.reprefill_expected == 0 and record.extra["reprefill_tokens"] == 0
        # what the turn decoded is a prefix of the next prompt, token for token: the forced close
        # and the whitespace after it included
        history = engine.prompt_ids(add_generation_prompt=False)
        cached = engine.cached_tokens()
        assert common_prefix(cached, history) == len(cached)
        assert engine.reprefill_expected() == 0


@pytest.mark.parametrize("history", ["template", "keep"])
def test_the_reprefill_shown_before_a_turn_is_what_it_prefills_again(engine_for, history):
    engine = engine_for(history)
    costs = []
    for question in QUESTIONS:
        predicted = engine.reprefill_expected()  # before the question is typed
        record = list(engine.send(question))[-1].record
        assert record.reprefill_expected == predicted
        assert abs(record.extra.get("reprefill_tokens", 0) - predicted) <= 1
        costs.append(predicted)
    if history == "template":  # the template drops each thought: the answer after it is prefilled again
        assert sum(costs[1:]) > 0
    else:
        assert costs == [0] * len(QUESTIONS)


@pytest.mark.parametrize("budget", [6, -1])
def test_think_more_cuts_the_cache_back_and_prefills_nothing(engine_for, budget):
    """A budget's forced close (6), or the model's own end inside its thought (-1: no budget): think
    more goes on from where the thought ended, re-prefilling nothing, and answers again beside it."""
    engine = engine_for("keep")
    engine.thinking.budget = None if budget < 0 else budget
    first = list(engine.send("What is the capital of France?"))[-1].record
    old = engine.leaf
    record = list(engine.think_more(8))[-1].record
    assert record.extra["think_more"] == 8 and record.extra["think_more_from"] == "cache"
    assert record.prefill_tokens == 0 and record.extra["forced_prefilled"] == 0  # nothing run again
    assert record.cached_tokens == record.prompt_tokens
    assert 0 < record.extra["thought_tokens_sampled"] <= 8
    assert record.extra["thinking_closed_by"] in ("budget", "end of turn")
    assert record.reply.strip()  # it answered
    kept = first.thinking.rstrip("\n") if budget >= 0 else first.thinking  # the forced close's "\n" is not kept
    assert record.thinking.startswith(kept) and len(record.thinking) > len(kept)
    family, index = engine.tree.siblings(engine.leaf)
    assert family == [old, engine.leaf] and index == 1  # beside the old reply, which stays
    assert engine.tree[old].thinking == first.thinking


def test_think_more_after_a_save_goes_on_from_the_cache(engine_for, tmp_path):
    """A kept chat is saved after every turn, and a save cuts the cache to the path's cells: where
    the template drops the thought, that cut took the thought too, and think more prefilled it again
    from its text. The last turn's cells now stay, and only text typed ahead is cut."""
    from chatapp.engine.sessions.manager import SessionManager

    engine = engine_for("template")
    live = SessionManager.open(engine.settings, tmp_path).resume("kept", engine)
    first = list(engine.send(QUESTIONS[0]))[-1].record
    assert first.thinking  # a thought the template will leave out of the next prompt
    live.save_turn(live.annotate(first))
    record = list(engine.think_more(8))[-1].record
    assert record.extra["think_more_from"] == "cache"
    assert record.prefill_tokens == 0 and record.extra["forced_prefilled"] == 0


def test_think_more_on_an_older_reply_in_a_new_process_goes_on_from_a_saved_state(engine_for, tmp_path):
    """The first reply of a saved two-turn session, thought on in a new process: the second turn's
    saved state holds the first thought ("keep"), so only its last token runs again, for its logits,
    where it was prefilled whole from its text before."""
    from chatapp.engine.sessions.manager import SessionManager

    engine = engine_for("keep")
    manager = SessionManager.open(engine.settings, tmp_path)
    live = manager.resume("thoughts", engine)
    first = list(engine.send(QUESTIONS[0]))[-1].record
    live.save_turn(live.annotate(first))
    live.save_turn(live.annotate(list(engine.send(QUESTIONS[1]))[-1].record))
    older = first.extra["message_id"]
    assert engine.tree.leaf != older

    again = engine_for("keep")  # a new process: nothing in memory, the session's files on disk
    report = manager.resume("thoughts", again).report
    assert report.restored_tokens > 0
    record = list(again.think_more(8, older))[-1].record
    forced = record.extra["forced_tokens"]
    assert forced > 8  # the first thought, budget 8 and its close
    assert record.extra["think_more_from"] == "kept"
    assert record.extra["forced_prefilled"] == 1 and record.prefill_tokens == 1
    assert record.thinking.startswith(first.thinking.rstrip("\n"))
    assert again.tree.siblings(again.leaf)[0] == [older, again.leaf]
