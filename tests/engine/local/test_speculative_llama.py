"""Speculative decoding's llama.cpp side on the real default model: the sampler chain's
distribution, verify batches, and replies equal to plain decoding."""

from __future__ import annotations

import numpy as np
import pytest

from chatapp.engine.drafting.policy import DraftPolicy
from chatapp.engine.local.llama import ChainDistribution, LlamaRuntime, LoadOptions, VerifyTarget, can_remove_cells
from chatapp.engine.drafting.speculative import SpeculativeDecoder
from tests.engine.drafting import chi_square
from tests.engine.drafting.always_draft import AlwaysDraft
from tests.engine.local.paragraph import PARAGRAPH

PROMPTS = {
    "copy": f"Repeat the following paragraph exactly, but change the word 'red' to 'green':\n\n{PARAGRAPH}",
    "code": ("def total(items):\n    result = 0\n    for item in items:\n        result += item.price * item.count\n"
             "    return result\n\nRename the variable result to acc and show the whole function."),
    "chat": "Write a short poem about autumn leaves.",
}
SPREAD = "Name a random word."
"""A context whose next token is uncertain: the chain keeps many candidates."""


@pytest.fixture(scope="module")
def runtime(default_model_path):
    # q8_0 turns flash attention on: without it, llama.cpp's CPU attention gives a batch's rows
    # logits that differ from single-token steps once 32 cells are cached (up to ~1 logit seen),
    # and greedy replies can change. With it, the rows are bit-identical to plain steps.
    rt = LlamaRuntime(default_model_path, LoadOptions(n_ctx=1024, kv_type="q8_0"))
    yield rt
    rt.close()


def prompt_ids(rt, text):
    rendered = rt.render_chat([{"role": "user", "content": text}], add_generation_prompt=True)
    return rt.tokenize(rendered, special=True)


def prefill(rt, text, suffix=""):
    ids = prompt_ids(rt, text) + (rt.tokenize(suffix, special=False) if suffix else [])
    rt.clear_kv()
    rt.eval(ids)
    return ids


# --- the distribution llama_sampler_sample draws from -------------------------------------
def seeded_draws(rt, temperature, n):
    counts: dict[int, int] = {}
    for seed in range(n):
        sampler = rt.sampler(temperature=temperature, seed=seed)
        token = sampler.sample()
        sampler.close()
        counts[token] = counts.get(token, 0) + 1
    return counts


def against(counts, ids, probs, n):
    observed = [counts.get(int(i), 0) for i in ids] + [n - sum(counts.get(int(i), 0) for i in ids)]
    expected = list(n * probs / probs.sum()) + [0.0]  # a draw outside the candidates is impossible
    return chi_square.passes(observed, expected)


@pytest.mark.parametrize("temperature", [0.7, 1.5])
def test_chain_distribution_is_what_the_sampler_draws_from(runtime, temperature):
    prefill(runtime, SPREAD, "Sure! Here is a random word:")
    dist = ChainDistribution(runtime, temperature=temperature)
    ids, probs = dist.at(-1)
    dist.close()
    assert len(ids) > 5 and probs.sum() == pytest.approx(1.0, abs=1e-6)
    n = 3000
    counts = seeded_draws(runtime, temperature, n)
    assert against(counts, ids, probs, n)
    # The same draws reject a distribution that is only a little off: the test has power.
    other = ChainDistribution(runtime, temperature=temperature * 1.25)
    other_ids, other_probs = other.at(-1)
    other.close()
    assert not against(counts, other_ids, other_probs, n)


def test_chain_distribution_at_temperature_zero_is_the_greedy_choice(runtime):
    prefill(runtime, SPREAD, "Sure! Here is a random word:")
    dist = ChainDistribution(runtime, temperature=0.0)
    ids, probs = dist.at(-1)
    dist.close()
    sampler = runtime.sampler(temperature=0.0)
    assert (ids.tolist(), probs.tolist()) == ([sampler.sample()], [1.0])
    sampler.close()


# --- verify batches --------------------------------------------------------------------------
def test_a_transformer_cache_can_lose_its_tail(runtime):
    assert can_remove_cells(runtime)


def plain_reply(rt, ids, temperature, seed, n):
    rt.clear_kv()
    rt.eval(ids)
    sampler = rt.sampler(temperature=temperature, seed=seed)
    out = []
    for _ in range(n):
        token = sampler.sample()
        if rt.is_end_of_generation(token):
            break
        out.append(token)
        rt.eval([token])
    sampler.close()
    return out


def speculative_reply(rt, ids, temperature, seed, n, policy):
    rt.clear_kv()
    rt.eval(ids)
    sampler = rt.sampler(temperature=temperature, seed=seed)
    target = VerifyTarget(rt, sampler)
    decoder = SpeculativeDecoder(target, rt.is_end_of_generation, policy=policy)
    decoder.begin(ids)
    out = []
    while len(out) < n:
        step = decoder.step(n - len(out), rt.n_ctx - rt.n_cached)
        # The runtime's count of cached tokens stays llama.cpp's own cell count after every step.
        assert rt.n_cached == rt.kv_cells_used()
        assert rt.kv_tokens == ids + out + list(step.tokens[:rt.n_cached - len(ids) - len(out)])
        out.extend(step.tokens[:-1] if step.ended else step.tokens)
        if step.ended:
            break
    target.close()
    sampler.close()
    return out, decoder.stats


@pytest.mark.parametrize(("temperature", "seed"), [(0.0, 1), (0.8, 42)])
@pytest.mark.parametrize("name", list(PROMPTS))
def test_replies_with_drafts_equal_replies_without(runtime, name, temperature, seed):
    ids = prompt_ids(runtime, PROMPTS[name])
    expected = plain_reply(runtime, ids, temperature, seed, 80)
    drafted, stats = speculative_reply(runtime, ids, temperature, seed, 80, AlwaysDraft(k_max=6))
    assert drafted == expected
    assert stats.drafted > 0
    if name == "copy":
        assert stats.accepted > 20
    chosen, _ = speculative_reply(runtime, ids, temperature, seed, 80, DraftPolicy())
    assert chosen == expected


def test_the_context_fills_mid_speculation_without_overflow(default_model_path):
    rt = LlamaRuntime(default_model_path, LoadOptions(n_ctx=256, kv_type="q8_0"))
    try:
        ids = prompt_ids(rt, PROMPTS["copy"])
        rt.eval(ids)
        sampler = rt.sampler(temperature=0.0)
        target = VerifyTarget(rt, sampler)
        decoder = SpeculativeDecoder(target, lambda t: False, policy=AlwaysDraft(k_max=8))
        decoder.begin(ids)
        while not decoder.step(10_000, rt.n_ctx - rt.n_cached).full:
            assert rt.n_cached == rt.kv_cells_used() <= rt.n_ctx
        assert rt.n_cached == rt.n_ctx == rt.kv_cells_used()
        assert decoder.stats.accepted > 0
        target.close()
        sampler.close()
    finally:
        rt.close()


def test_verify_rows_equal_plain_steps_bit_for_bit(runtime):
    ids = prompt_ids(runtime, PROMPTS["chat"])
    reply = plain_reply(runtime, ids, 0.0, 1, 40)
    dist = ChainDistribution(runtime, temperature=1.0, top_k=0, top_p=1.0, min_p=0.0)
    runtime.clear_kv()
    runtime.eval(ids)
    singles = []
    for token in reply[:12]:
        singles.append(dist.at(-1))
        runtime.eval([token])
    runtime.keep_kv_prefix(len(ids) - 1)
    sampler = runtime.sampler(temperature=0.0)
    target = VerifyTarget(runtime, sampler)
    target.decode([ids[-1], *reply[:11]])
    for row, (ids_single, probs_single) in enumerate(singles):
        ids_batch, probs_batch = dist.at(row)
        assert np.array_equal(ids_batch, ids_single) and np.array_equal(probs_batch, probs_single)
    target.close()
    sampler.close()
    dist.close()
