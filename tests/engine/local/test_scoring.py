"""A reply written without probabilities, scored after the fact on the real model: one prefill
pass over it gives each token what sampling it reported (up to the batch's rounding), the shown
leaf's cache is as it was, and a branch at any scored token keeps the reply's start."""

from __future__ import annotations

from dataclasses import replace

from chatapp.engine.backend import GenerationSettings
from tests.engine.conftest import make_engine


def test_scoring_an_earlier_reply_reads_it_back_as_sampled_and_leaves_the_leaf_s_cache(runtime):
    engine = make_engine(runtime, "You are a concise assistant.",
                         GenerationSettings(temperature=0.0, max_tokens=16, logprobs=5))
    sampled = list(engine.send("Name a fruit."))[-1].record.probs
    engine.generation = replace(engine.generation, logprobs=0)
    list(engine.send("And a colour?"))
    first, last = [m.id for m in engine.messages if m.role == "assistant"]
    assert engine.reply_probs(first) == sampled and engine.reply_probs(last) == ()
    before = engine.branch_figures()

    scored = engine.score_reply(first, 5)
    assert [p.id for p in scored.probs] == [p.id for p in sampled]  # greedy: each the raw top 1, as sampled
    for read, taken in zip(scored.probs, sampled):
        assert read.top[0].id == taken.top[0].id and read.rank == 1 and read.p_sampled == 1.0
        assert abs(read.logprob - taken.logprob) < 0.25  # a batch's sums round apart from single steps'
    assert engine.reply_probs(first) == scored.probs
    assert scored.prefilled >= len(scored.probs) and scored.cached > 0  # the system prompt was cached
    assert engine.branch_figures() == before  # the shown leaf's cache was stashed and restored

    scored_last = engine.score_reply(last, 5)
    assert "".join(p.token for p in scored_last.probs) == engine.messages[-1].content
    assert scored_last.prefilled == len(scored_last.probs) + 1  # the cache held the path: only the reply, and its
    # question's last token for the first row


def test_a_branch_at_a_scored_token_keeps_the_tokens_before_it(runtime):
    engine = make_engine(runtime, "You are a concise assistant.", GenerationSettings(temperature=0.0, max_tokens=12))
    list(engine.send("Name a fruit."))
    reply = engine.leaf
    probs = engine.score_reply(reply, 5).probs
    at, other = 3, probs[3].top[1].id
    record = list(engine.branch_at_step(reply, at, other))[-1].record
    assert engine.last_reply_ids()[:at + 1] == [*(p.id for p in probs[:at]), other]
    assert record.extra["action"] == "regenerate" and record.extra["branch"] == "2/2"
    assert record.prefill_tokens <= 2  # the reply's start was in the cache
