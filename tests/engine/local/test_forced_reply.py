"""A branch from a reply token, in process, on the real model: the new reply starts with the old
one's first K tokens and the chosen token, and nothing of the conversation is prefilled again."""

from __future__ import annotations

import pytest

from chatapp.engine.backend import GenerationSettings
from tests.engine.conftest import make_engine

QUESTION = "Write one sentence about the sea."


@pytest.mark.parametrize("k", [0, 5])
def test_a_branch_starts_with_k_tokens_and_the_chosen_one_and_prefills_only_it(runtime, k):
    engine = make_engine(runtime, "You are a concise assistant.",
                         GenerationSettings(temperature=0.0, max_tokens=16, logprobs=3))
    first = list(engine.send(QUESTION))[-1].record
    reply = engine.last_reply_ids()
    assert len(reply) == 16 and first.cached_tokens == 0
    other = first.probs[k].top[1].id  # the runner-up at position k
    assert other != reply[k]
    forced = reply[:k] + [other]
    events = list(engine.regenerate(forced=forced))
    record = events[-1].record
    branch = engine.last_reply_ids()
    assert branch[: k + 1] == forced
    assert record.prompt_tokens == first.prompt_tokens + k + 1  # the forced tokens are read as the prompt's tail
    assert record.cached_tokens == first.prompt_tokens + k  # the conversation and the kept reply tokens
    assert record.cached_tokens + record.prefill_tokens == record.prompt_tokens  # the figures add up
    view = events[-1].view  # the forced tokens, read as prompt, are the reply's all the same
    assert {t.role for t in view[first.prompt_tokens:] if not t.token.special} == {"assistant"}
    assert [t.origin for t in view[first.prompt_tokens:first.prompt_tokens + k + 1]] == ["cached"] * k + ["prefilled"]
    assert record.prefill_tokens == 1  # the chosen token only
    assert record.extra["forced_tokens"] == k + 1 and record.extra["forced_prefilled"] == 1
    assert runtime.kv_tokens == engine.cached_tokens() and runtime.kv_tokens[first.prompt_tokens:] == branch
    described = "".join(t.piece for t in engine.describe(branch))
    assert record.reply == described and record.reply.startswith("".join(
        t.piece for t in engine.describe(forced)))
    # Only the tokens after the forced ones are sampled, and they alone have probabilities.
    assert record.generated_tokens == len(record.probs) == len(branch) - (k + 1)
    assert [p.id for p in record.probs] == branch[k + 1:]
    assert engine.messages[-1].content == record.reply and len(engine.messages) == 3


def test_a_branch_decodes_on_as_the_model_would_after_those_tokens(runtime):
    """Greedy after the forced tokens is greedy after the same tokens prefilled from scratch."""
    engine = make_engine(runtime, "You are a concise assistant.", GenerationSettings(temperature=0.0, max_tokens=12))
    list(engine.send(QUESTION))
    reply = engine.last_reply_ids()
    prompt_tokens = len(engine.cached_tokens()) - len(reply)
    forced = reply[:3] + [reply[3] + 1]
    list(engine.regenerate(forced=forced))
    branched = engine.last_reply_ids()
    prompt = engine.cached_tokens()[:prompt_tokens]
    runtime.clear_kv()
    runtime.eval(prompt + forced)
    sampler = runtime.sampler(temperature=0.0)
    fresh = []
    for _ in range(len(branched) - len(forced)):
        token = sampler.sample()
        if runtime.is_end_of_generation(token):
            break
        fresh.append(token)
        runtime.eval([token])
    sampler.close()
    assert branched == forced + fresh

