"""The server backend's after-chain figures, worked out from raw top candidates, against
llama.cpp's own chain over the whole vocabulary (ChainDistribution), on the real model's logits."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from chatapp.engine.backend import GenerationSettings
from chatapp.engine.local.llama import ChainDistribution
from chatapp.engine.server import probs
from chatapp.engine.server.answers import TokenLogprobs, TopLogprob

CHAINS = [GenerationSettings(temperature=0.8, top_k=40, top_p=0.9, min_p=0.05),
          GenerationSettings(temperature=1.0, top_k=40, top_p=0.95, min_p=0.05),
          GenerationSettings(temperature=1.3, top_k=12, top_p=1.0, min_p=0.0),
          GenerationSettings(temperature=0.7, top_k=0, top_p=0.8, min_p=0.0),
          GenerationSettings(temperature=0.7, top_k=0, top_p=1.0, min_p=0.1)]


def _raw_top(runtime, n: int) -> tuple[np.ndarray, np.ndarray]:
    sampler = runtime.sampler(temperature=1.0)
    logits = sampler.logits().astype(np.float64)
    sampler.close()
    logp = logits - logits.max() - np.log(np.exp(logits - logits.max()).sum())
    order = np.argsort(-logits, kind="stable")[:n]
    return order, logp[order]


@pytest.mark.parametrize("chain", CHAINS)
def test_after_chain_from_raw_top_candidates_is_llama_cpp_s_chain(runtime, chain):
    runtime.clear_kv()
    runtime.eval(runtime.tokenize("<|im_start|>user\nName a colour.<|im_end|>\n<|im_start|>assistant\n",
                                  special=True))
    ids, logp = _raw_top(runtime, probs.MAX_REQUEST)
    # As many as the server backend asks for; with top_k off, a list long enough to reach the cut.
    n = probs.n_probs(replace(chain, logprobs=5)) if chain.top_k > 0 else probs.MAX_REQUEST
    worked_out = probs.after_chain(logp[:n], chain)
    whole = ChainDistribution(runtime, temperature=chain.temperature, top_k=chain.top_k, top_p=chain.top_p,
                              min_p=chain.min_p)
    kept, p = whole.at(-1)
    whole.close()
    expected = dict(zip(kept.tolist(), p.tolist()))
    assert worked_out is not None
    for i, q in zip(ids.tolist(), worked_out.tolist()):
        assert q == pytest.approx(expected.get(i, 0.0), abs=1e-5)


def test_what_a_list_cannot_tell_is_none():
    flat = np.log(np.full(20, 1 / 1000))  # twenty of a thousand equally likely tokens
    assert probs.after_chain(flat, GenerationSettings(temperature=1.0, top_k=0, top_p=0.9, min_p=0.0)) is None
    assert probs.after_chain(flat, GenerationSettings(temperature=1.0, top_k=40, top_p=0.9, min_p=0.0)) is None
    greedy = probs.after_chain(flat, GenerationSettings(temperature=0.0))
    assert greedy.tolist() == [1.0] + [0.0] * 19


def test_a_token_s_entry_becomes_token_probs():
    generation = GenerationSettings(temperature=1.0, top_k=3, top_p=1.0, min_p=0.0, logprobs=2)
    entry = TokenLogprobs(7, "b", float(np.log(0.3)), [TopLogprob(5, "a", float(np.log(0.6))),
                                                        TopLogprob(7, "b", float(np.log(0.3))),
                                                        TopLogprob(9, "c", float(np.log(0.1)))])
    step = probs.token_probs(entry, generation, 2)
    assert (step.id, step.rank, step.rank_sampled, step.entropy) == (7, 2, 2, None)
    assert step.p_sampled == pytest.approx(0.3) and [c.id for c in step.top] == [5, 7]
    assert probs.n_probs(generation) == 3 and probs.n_probs(GenerationSettings(temperature=0.0, logprobs=4)) == 4
