"""Each reply token's sampling step, in process, on the real model: what it reports is what the
model computed and what the sampler chain drew from."""

from __future__ import annotations

import math

import numpy as np
import pytest

from chatapp.engine.backend import GenerationSettings
from chatapp.engine.local.llama import ChainDistribution
from chatapp.engine.local.probing import ProbingSampler
from tests.engine.conftest import make_engine

QUESTION = "Write one sentence about the sea."


def test_at_temperature_0_the_chosen_token_is_the_raw_top_1_at_every_step(runtime):
    engine = make_engine(runtime, "You are a concise assistant.",
                         GenerationSettings(temperature=0.0, max_tokens=24, logprobs=5))
    record = list(engine.send(QUESTION))[-1].record
    assert len(record.probs) == record.generated_tokens == 24
    for step in record.probs:
        assert step.top[0].id == step.id and step.rank == 1
        assert step.p_sampled == 1.0 and step.rank_sampled == 1
        assert [c.p_sampled for c in step.top[1:]] == [0.0] * 4
        assert step.logprob == step.top[0].logprob <= 0
        assert all(a.logprob >= b.logprob for a, b in zip(step.top, step.top[1:]))
        assert 0 <= step.entropy <= math.log2(runtime.n_vocab)
    assert engine.last_reply_ids() == [p.id for p in record.probs]


@pytest.mark.parametrize("temperature", [0.0, 0.8])
def test_asking_for_probabilities_changes_no_reply(runtime, temperature):
    """The probing draw is llama_sampler_sample's: the same tokens for the same seed. At
    temperature 0 the plain turns take the argmax in place and the probing one applies the chain."""
    replies = []
    for logprobs in (0, 3, 0):
        engine = make_engine(runtime, "You are a concise assistant.",
                             GenerationSettings(temperature=temperature, max_tokens=32, seed=11, logprobs=logprobs))
        engine.clear_cache()
        replies.append(list(engine.send(QUESTION))[-1].record)
    assert replies[0].reply == replies[1].reply == replies[2].reply
    assert replies[1].probs and not replies[0].probs and replies[0].to_json().get("logprobs") is None
    assert len(replies[1].to_json()["logprobs"]) == replies[1].generated_tokens


def _prefilled(runtime, text: str) -> None:
    runtime.clear_kv()
    runtime.eval(runtime.tokenize(text, special=True))


@pytest.mark.parametrize("chain", [dict(temperature=0.8, top_k=40, top_p=0.9, min_p=0.05),
                                   dict(temperature=1.3, top_k=12, top_p=0.99, min_p=0.0),
                                   dict(temperature=0.7, top_k=0, top_p=0.8, min_p=0.02)])
def test_the_after_chain_distribution_is_the_whole_vocabulary_chain_s(runtime, chain):
    """Drawn from the top-k candidates only, the distribution equals what llama.cpp's chain makes
    of the whole vocabulary (ChainDistribution), step after step; top_k 0 takes every token."""
    _prefilled(runtime, "<|im_start|>user\nList three colours.<|im_end|>\n<|im_start|>assistant\n")
    whole = ChainDistribution(runtime, **chain)
    probing = ProbingSampler(runtime.sampler(seed=5, **chain), n_top=20)
    try:
        for _ in range(12):
            ids, probs = whole.at(-1)
            expected = dict(zip(ids.tolist(), probs.tolist()))
            token = probing.sample()
            step = probing.taken[-1]
            for i, p in zip(step.top_ids.tolist(), step.top_sampled.tolist()):
                assert p == pytest.approx(expected.get(i, 0.0), abs=1e-6)
            assert step.p_sampled == pytest.approx(expected[token], abs=1e-6)
            assert sum(expected.values()) == pytest.approx(1.0, abs=1e-5)
            runtime.eval([token])
    finally:
        whole.close()
        probing.close()


def test_raw_probabilities_and_entropy_are_the_softmax_of_the_logits(runtime):
    _prefilled(runtime, "<|im_start|>user\nHi!<|im_end|>\n<|im_start|>assistant\n")
    sampler = runtime.sampler(temperature=1.0, seed=3)
    logits = sampler.logits().astype(np.float64)
    probing = ProbingSampler(sampler, n_top=20)
    token = probing.sample()
    probing.close()
    logp = logits - logits.max() - np.log(np.exp(logits - logits.max()).sum())
    step = probing.taken[-1]
    order = np.argsort(-logits, kind="stable")[:20]
    assert step.top_ids.tolist() == order.tolist()
    assert np.allclose(step.top_logprobs, logp[order], atol=1e-5)
    assert step.logprob == pytest.approx(logp[token], abs=1e-5)
    assert step.rank == 1 + int((logits > logits[token]).sum())
    assert step.entropy == pytest.approx(-(np.exp(logp) * logp).sum() / math.log(2), abs=1e-4)


def _wilson_hilferty(df: int, z: float = 3.09) -> float:
    """The chi-square quantile for df degrees of freedom at z standard deviations (3.09: p = 0.001)."""
    a = 2.0 / (9.0 * df)
    return df * (1.0 - a + z * math.sqrt(a)) ** 3


def _chi_square(counts: dict[int, int], expected: dict[int, float], draws: int) -> tuple[float, int]:
    """Pearson's statistic over the candidates expected at least 5 times, the rest as one bin."""
    stat, rest_seen, rest_expected, bins = 0.0, draws, draws, 0
    for token, p in expected.items():
        if p * draws >= 5:
            seen = counts.get(token, 0)
            stat += (seen - p * draws) ** 2 / (p * draws)
            rest_seen -= seen
            rest_expected -= p * draws
            bins += 1
    if rest_expected >= 5:
        stat += (rest_seen - rest_expected) ** 2 / rest_expected
        bins += 1
    elif rest_seen > 5:  # draws where nothing (or almost nothing) was expected: wrong at once
        stat = math.inf
    return stat, bins - 1


def test_draws_follow_the_reported_after_chain_distribution(runtime):
    """400 one-token draws, each with its own seed, at one prompt and temperature 1.0: the
    frequencies match p_sampled (chi-square, p = 0.001), and they do not match what a wrong
    chain would report (the raw distribution, or temperature 0.7)."""
    _prefilled(runtime, "<|im_start|>user\nName an animal.<|im_end|>\n<|im_start|>assistant\nThe")
    chain = dict(temperature=1.0, top_k=40, top_p=0.95, min_p=0.05)
    draws, counts, reported = 400, {}, None
    for seed in range(draws):
        probing = ProbingSampler(runtime.sampler(seed=seed, **chain), n_top=20)
        token = probing.sample()
        probing.close()
        counts[token] = counts.get(token, 0) + 1
        step = probing.taken[-1]
        shown = {int(i): float(p) for i, p in zip(step.top_ids, step.top_sampled)}
        assert reported is None or shown == reported  # the same logits every time
        reported = shown
    assert len(counts) >= 3, "a prompt with a spread-out next token makes the test bite"
    stat, df = _chi_square(counts, reported, draws)
    assert df >= 2 and stat < _wilson_hilferty(df)
    raw = {int(i): float(math.exp(lp)) for i, lp in zip(step.top_ids, step.top_logprobs)}
    stat, df = _chi_square(counts, raw, draws)
    assert stat > _wilson_hilferty(df)
    colder = ChainDistribution(runtime, **{**chain, "temperature": 0.7})
    ids, probs = colder.at(-1)
    colder.close()
    stat, df = _chi_square(counts, dict(zip(ids.tolist(), probs.tolist())), draws)
    assert stat > _wilson_hilferty(df)


def test_accepted_drafts_report_their_verify_rows(default_model_path):
    """With drafting, each token's step comes from its row of the verify batch: the figures equal
    the plain loop's (the drafting tests' exactness check guards the rows being a single step's).
    A q8_0 cache on one thread: the setup whose batches ggml computes as single steps (with f16 on
    two threads drafting turns itself off), measured here first, so a machine where it is not
    exact fails on that rather than skipping the comparison."""
    from chatapp.engine.local.exact_batches import batch_check
    from chatapp.engine.local.llama import LlamaRuntime, LoadOptions
    from tests.engine.local.speculative import PROMPTS, drafting_engine

    runtime = LlamaRuntime(default_model_path, LoadOptions(n_ctx=1024, kv_type="q8_0", n_threads=1,
                                                           n_threads_batch=1))
    try:
        check = batch_check(runtime, 9, 1)
        assert check is not None and check.passed, f"one thread, q8_0: batches differ from single steps: {check}"
        _drafts_and_plain(runtime, PROMPTS["copy"], drafting_engine)
    finally:
        runtime.close()


def _drafts_and_plain(runtime, prompt, drafting_engine) -> None:
    engine = drafting_engine(runtime, max_tokens=48)
    engine.set_generation(logprobs=4)
    drafted = list(engine.send(prompt))[-1].record
    assert drafted.extra.get("draft_accepted"), f"no draft was accepted: {drafted.extra.get('draft_off_because', '')}"
    plain = make_engine(runtime, "", GenerationSettings(temperature=0.0, max_tokens=48, logprobs=4))
    plain.clear_cache()
    reference = list(plain.send(prompt))[-1].record
    assert drafted.reply == reference.reply and len(drafted.probs) == len(reference.probs) == 48
    for a, b in zip(drafted.probs, reference.probs):
        assert a.id == b.id and a.rank == b.rank == 1
        assert [c.id for c in a.top] == [c.id for c in b.top]
        assert a.logprob == pytest.approx(b.logprob, abs=1e-4)
