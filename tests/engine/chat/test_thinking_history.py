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
