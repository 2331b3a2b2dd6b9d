"""Speculative sampling's acceptance rule for a deterministic draft, which keeps the output exact.

The target distribution p is what the sampler chain would draw the next token from (after
top_k, top_p, min_p and temperature; a point mass on the argmax at temperature 0). A drafter
that proposes one token d, with no randomness of its own, is a distribution q that puts all
its mass on d. Leviathan et al.'s rule accepts d with probability min(1, p(d)/q(d)) = p(d) and,
on rejection, samples from max(p - q, 0) renormalised, which is p with d removed. So:

    P(output = d)       = p(d)
    P(output = x != d)  = (1 - p(d)) * p(x) / (1 - p(d)) = p(x)

the output is distributed exactly as p, whatever the draft. At temperature 0, p is a point mass
on the argmax, so a draft is accepted iff it is the argmax and a rejection yields the argmax.

The same law comes from drawing x from p and accepting iff x == d: P(accept) = p(d), and the
output is x ~ p. chatapp.engine.drafting.speculative applies the rule in that form, through llama.cpp's
own sampler; `accept_draft` is the explicit form, for code that holds p as arrays.
"""

from __future__ import annotations

import numpy as np


def draw(ids: np.ndarray, probs: np.ndarray, rng: np.random.Generator) -> int:
    """One token id from the distribution `probs` over candidate `ids` (probs need not sum to 1)."""
    cumulative = np.cumsum(probs, dtype=np.float64)
    if cumulative.size == 0 or cumulative[-1] <= 0:
        raise ValueError("the distribution has no mass")
    at = int(np.searchsorted(cumulative, rng.random() * cumulative[-1], side="right"))
    return int(ids[min(at, ids.size - 1)])


def accept_draft(ids: np.ndarray, probs: np.ndarray, draft: int, rng: np.random.Generator) -> tuple[int, bool]:
    """Accept `draft` with probability p(draft); on rejection draw from p with the draft removed.

    `ids` are the candidate token ids after the sampler chain and `probs` their probabilities
    (a draft outside the candidates has p = 0). Returns (the token to emit, whether it is the
    accepted draft). The emitted token is distributed exactly as p (see the module docstring).
    """
    ids = np.asarray(ids)
    probs = np.asarray(probs, dtype=np.float64)
    hit = np.flatnonzero(ids == draft)
    p_draft = float(probs[hit[0]] / probs.sum()) if hit.size else 0.0
    if rng.random() < p_draft:
        return int(draft), True
    rest = probs.copy()
    rest[hit] = 0.0
    return draw(ids, rest, rng), False
