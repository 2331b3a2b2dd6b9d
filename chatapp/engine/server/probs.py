"""A llama-server's token probabilities (`n_probs`) as `TokenProbs`.

One streamed /completion samples each token once, and llama-server reports either the raw
distribution's top candidates (`n_probs`) or the after-chain one's (with
`post_sampling_probs`), not both. chatapp asks for the raw ones, as many as the chain's top_k
when that is more than the view shows, and works out the after-chain probabilities from them
with the chain the request sets (top_k, top_p, min_p, temperature; `backend.sampling`): every
step of it needs only the candidates it keeps, so a list that holds them gives the exact
figures. Where the list cannot tell (top_k off and the candidates listed do not reach the cut),
`p_sampled` is None. The entropy needs the whole distribution, which a server does not send:
None.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from chatapp.engine.backend import GenerationSettings
from chatapp.engine.sampling import Candidate, TokenProbs
from chatapp.engine.server.answers import TokenLogprobs

MAX_REQUEST = 100
"""The most raw candidates asked for per token (a top_k above it is not followed exactly)."""


def n_probs(generation: GenerationSettings) -> int:
    """Raw candidates to ask the server for: the view's, or the chain's top_k when more."""
    if generation.logprobs <= 0:
        return 0
    k = generation.top_k if generation.temperature > 0 and 0 < generation.top_k <= MAX_REQUEST else 0
    return max(generation.logprobs, k)


def after_chain(logprobs: Sequence[float], generation: GenerationSettings) -> np.ndarray | None:
    """The chain's probabilities for these raw candidates (log-probabilities over the whole
    vocabulary, most probable first), 0 for those it removes; None when the list is too short
    to tell. As llama.cpp's samplers: top_k keeps the first k, top_p the shortest prefix whose
    renormalised mass reaches top_p, min_p those within a factor min_p of the best, each keeping
    at least one; then softmax at the temperature (greedy: all on the first)."""
    lp = np.asarray(logprobs, dtype=np.float64)
    out = np.zeros(len(lp))
    if not len(lp):
        return None
    if generation.temperature <= 0:
        out[0] = 1.0
        return out
    kept, whole = len(lp), False
    """`whole`: the kept set is known to hold every token the chain still has."""
    if generation.top_k > 0:
        if len(lp) < generation.top_k:
            return None
        kept, whole = generation.top_k, True
    if generation.top_p < 1.0:
        # Over the top_k survivors the chain renormalises; over the whole vocabulary the raw
        # probabilities are already normalised.
        p = _softmax(lp[:kept]) if whole else np.exp(lp[:kept])
        reached = np.flatnonzero(np.cumsum(p) >= generation.top_p)
        if reached.size:
            kept, whole = int(reached[0]) + 1, True
        elif not whole:
            return None
    if generation.min_p > 0.0:
        within = int(np.count_nonzero(lp[:kept] >= lp[0] + math.log(generation.min_p)))
        if within < kept:
            kept, whole = max(within, 1), True
    if not whole:
        return None
    out[:kept] = _softmax(lp[:kept] / generation.temperature)
    return out


def token_probs(entry: TokenLogprobs, generation: GenerationSettings, shown: int) -> TokenProbs:
    listed = entry.top_logprobs
    sampled = after_chain([c.logprob for c in listed], generation)
    where = next((i for i, c in enumerate(listed) if c.id == entry.id), None)
    p_chosen = None if sampled is None else (float(sampled[where]) if where is not None else 0.0)
    rank_sampled = None if p_chosen is None else 1 + int(np.count_nonzero(sampled > p_chosen))
    top = tuple(Candidate(c.id, c.token, c.logprob, None if sampled is None else float(sampled[i]))
                for i, c in enumerate(listed[:shown]))
    return TokenProbs(entry.id, entry.token, entry.logprob, p_chosen, None if where is None else where + 1,
                      rank_sampled, None, top)


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max())
    return e / e.sum()
