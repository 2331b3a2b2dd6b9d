"""A reply scored after the fact, in process: its tokens' probabilities from one prefill pass.

A reply written while the confidence view was off has no probabilities. Reading it back costs
no new reply: the prompt that asked for it and the reply's own tokens go through the model in
batches with logits at every row (what a speculative step's verify batch does), and row i, the
distribution after the token before reply token i, gives that token's `TokenProbs` as if it had
been sampled there: the model's own probability, rank and entropy, and the probability in the
distribution the sampler chain would draw from (`ChainDistribution`, the turn's chain without
its draw). What the cache already holds of the prompt is reused; the prompt's last token is
always run again, since its logits row is the first one wanted.

The cache ends holding the prompt and the reply, as after the turn that wrote it.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Sequence

import numpy as np

from chatapp.engine import tokens as token_views
from chatapp.engine.backend import GenerationSettings, prefill_batches, split_evenly
from chatapp.engine.local.llama import ChainDistribution, LlamaRuntime, VerifyTarget
from chatapp.engine.local.probing import _lookup
from chatapp.engine.sampling import Candidate, Scored, TokenProbs
from chatapp.engine.tokens import common_prefix
from chatapp.errors import InputError

_LN2 = math.log(2.0)
ROWS = 64
"""Tokens per batch with logits at every row: each row is a vocabulary's floats to read."""


def score(rt: LlamaRuntime, prompt: Sequence[int], reply: Sequence[int], generation: GenerationSettings,
          n_top: int, stop: threading.Event) -> Scored:
    """`reply`'s tokens after `prompt` (the templated path up to the question, with the
    generation prompt), each with its probabilities and `n_top` candidates."""
    started = time.perf_counter()
    prompt, reply = list(prompt), list(reply)
    if not prompt or not reply:
        raise InputError("nothing to score: the reply has no tokens")
    ids = prompt + reply
    if len(ids) > rt.n_ctx:
        raise InputError(f"the reply's path is {len(ids):,} tokens, more than the {rt.n_ctx:,}-token context")
    cached = min(common_prefix(rt.kv_tokens, ids), len(prompt) - 1)
    rt.keep_kv_prefix(cached)
    for size in prefill_batches(cached, len(prompt) - 1):  # the prompt before its last token, as a turn prefills it
        if stop.is_set():
            raise InputError("scoring stopped")
        rt.prefill(ids[rt.n_cached:rt.n_cached + size])
    chain = ChainDistribution(rt, temperature=generation.temperature, top_k=generation.top_k,
                              top_p=generation.top_p, min_p=generation.min_p)
    sampler = rt.sampler(temperature=generation.temperature)
    target = VerifyTarget(rt, sampler, capacity=ROWS)
    steps: list[tuple[int, float, float | None, int, int | None, float, np.ndarray, np.ndarray, np.ndarray]] = []
    try:
        for size in split_evenly(len(ids) - rt.n_cached, ROWS):
            if stop.is_set():
                raise InputError("scoring stopped")
            start = rt.n_cached
            target.decode(ids[start:start + size])
            for row in range(size):
                following = start + row + 1 - len(prompt)  # the reply token this row predicts
                if 0 <= following < len(reply):
                    steps.append(_step(target.row_logits(row if size > 1 else -1), reply[following],
                                       *chain.at(row if size > 1 else -1), n_top))
    finally:
        target.close()
        sampler.close()
        chain.close()
    piece = lambda t: rt.token_bytes(t).decode("utf-8", "replace")  # noqa: E731
    # A character split over tokens shows on the token that completes it, as for a sampled reply.
    names = ["" if t.special else t.piece for t in token_views.describe(rt, reply)]
    probs = tuple(TokenProbs(token, name, logprob, p_sampled, rank, rank_sampled, entropy,
                             tuple(Candidate(int(i), piece(int(i)), float(lp), float(ps))
                                   for i, lp, ps in zip(top, top_logprobs, top_sampled)))
                  for (token, logprob, p_sampled, rank, rank_sampled, entropy, top, top_logprobs, top_sampled), name
                  in zip(steps, names))
    return Scored(probs, cached, len(ids) - cached, (time.perf_counter() - started) * 1000)


def _step(logits: np.ndarray, token: int, kept_ids: np.ndarray, kept_p: np.ndarray, n_top: int):
    """One row as the step of `token`: its log-probability, the chain's probability of it, both
    ranks, the entropy in bits, and the top candidates with both probabilities."""
    row = logits.astype(np.float64)
    best = float(row.max())
    shifted = row - best
    exp = np.exp(shifted)
    total = float(exp.sum())
    log_total = best + math.log(total)
    entropy = (math.log(total) - float(np.dot(exp, shifted)) / total) / _LN2
    m = max(1, min(n_top, len(row)))
    top = np.argpartition(row, -m)[-m:]
    top = top[np.lexsort((top, -row[top]))]  # most probable first, the lower id first among equals
    sampled = _lookup(kept_ids, kept_p, np.append(top, token))
    p_chosen = float(sampled[-1])
    rank = 1 + int(np.count_nonzero(row > row[token]))
    rank_sampled = 1 + int(np.count_nonzero(kept_p > p_chosen)) if p_chosen > 0 else None
    return (int(token), float(row[token]) - log_total, p_chosen, rank, rank_sampled, entropy,
            top, row[top] - log_total, sampled[:-1])
