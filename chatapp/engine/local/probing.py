"""Each reply token's sampling step, in process, from the last logits row only.

`ProbingSampler` stands in for the turn's `Sampler`: each `sample(row)` reads the row's logits
in place (no copy of the vocabulary, no logits_all buffer), and

- finds the top candidates with numpy's argpartition: the N to report, or the chain's top_k
  when more (top_k is the chain's first sampler, so what it keeps is among these);
- draws the token by applying the turn's own llama.cpp chain to those candidates only
  (`Sampler.draw`): the same draw as `llama_sampler_sample` over the whole vocabulary, and the
  probabilities the chain wrote into the array it drew from are the after-chain distribution,
  so the distribution shown is the one sampled from, by construction. With top_k off the chain
  gets every token (slower, still exact);
- computes the raw log-probabilities and the entropy with one exp over the row.

The hot path keeps numbers only; `steps(piece)` names the tokens once the turn is over.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from chatapp.engine.local.llama import Sampler
from chatapp.engine.sampling import Candidate, TokenProbs

_LN2 = math.log(2.0)
GAP = 12.0
"""Logits this far below the best are e^-12 (6e-6) as likely: a shortlist for the top candidates."""


@dataclass(frozen=True, slots=True)
class _Step:
    token: int
    logprob: float
    p_sampled: float
    rank: int
    rank_sampled: int
    entropy: float
    top_ids: np.ndarray
    top_logprobs: np.ndarray
    top_sampled: np.ndarray


@dataclass(frozen=True, slots=True)
class _Raw:
    """What a step must keep of a logits row before the next decode overwrites it; the rest of
    a `_Step` is worked out after the turn (`ProbingSampler.taken`)."""

    token: int
    top: np.ndarray
    top_logits: np.ndarray
    kept: np.ndarray
    """The chain's survivors (Sampler.draw): ids and after-chain probabilities."""
    log_total: float
    logprob: float
    entropy: float
    rank: int
    """0 when the token is among `top` (always, unless the chain saw every token)."""


class ProbingSampler:
    """A `Sampler` that keeps, for every token it draws, what the step looked like.

    `sample` runs between two decodes, where each numpy call costs about three times what it
    costs in a loop (the decode leaves every cache cold; measured in a 128-token turn: 250 µs a
    step in all, against 113 µs for the plain sampler), so it does only what needs the logits
    row: the shortlist, the draw, the softmax sums. Ranks, lookups and conversions wait for
    `taken`, after the reply."""

    def __init__(self, sampler: Sampler, n_top: int) -> None:
        self._sampler = sampler
        self.n_top = n_top
        n_vocab = sampler.n_vocab
        top_k = sampler.top_k
        self._greedy = sampler.greedy
        # Under a grammar the chain draws from what the grammar allows, which a shortlist of the
        # best logits may not hold: every token goes through it (llama.cpp aborts the process
        # when its grammar is made to accept a token it refused).
        self._exact_subset = (sampler.greedy or 0 < top_k < n_vocab) and not sampler.constrained
        self._n_candidates = min(n_vocab, max(n_top, top_k if self._exact_subset and not sampler.greedy else 1))
        self._all_ids = None if self._exact_subset else np.arange(n_vocab, dtype=np.int32)
        self._exp = np.empty(n_vocab, dtype=np.float32)
        self._shifted = np.empty(n_vocab, dtype=np.float32)
        self._raw: list[_Raw] = []
        self._steps: list[_Step] = []

    def sample(self, row: int = -1) -> int:
        logits = self._sampler.logits(row)
        m = self._n_candidates
        best = float(logits.max())
        # The top m are among the tokens within GAP of the best when there are at least m of those:
        # a comparison over the row, then a partition of a few hundred, costs less than one of all.
        near = np.flatnonzero(logits >= best - GAP)
        top = near[np.argpartition(logits[near], -m)[-m:]] if len(near) >= m else np.argpartition(logits, -m)[-m:]
        # Most probable first; among equal logits the lower id first, as llama.cpp's sorts leave them.
        top = top[np.lexsort((top, -logits[top]))]
        top_logits = logits[top]
        if self._all_ids is None:
            token, kept = self._sampler.draw(top, top_logits)
        else:
            token, kept = self._sampler.draw(self._all_ids, logits)
        np.subtract(logits, best, out=self._shifted)
        np.exp(self._shifted, out=self._exp)
        total = float(self._exp.sum())  # float32's pairwise sum: ~1e-7 relative, at half the cost
        # H = log Z - E[logit], in nats, then bits; with the logits shifted by the best one, so the
        # float32 dot adds small numbers (unshifted it was 1e-4 bits off at 5.7 bits).
        entropy = (math.log(total) - float(np.dot(self._exp, self._shifted)) / total) / _LN2
        # Outside the shortlist only when the chain saw every token: then only the row can rank it.
        chosen_logit = float(logits[token])
        rank = 0 if self._exact_subset else 1 + int(np.count_nonzero(logits > chosen_logit))
        log_total = best + math.log(total)
        self._raw.append(_Raw(token, top, top_logits, kept, log_total, chosen_logit - log_total, entropy, rank))
        return token

    @property
    def taken(self) -> list[_Step]:
        """Every step so far, in order."""
        for raw in self._raw[len(self._steps):]:
            self._steps.append(self._step(raw))
        return self._steps

    def _step(self, raw: _Raw) -> _Step:
        token, top, n = raw.token, raw.top, self.n_top
        where = np.flatnonzero(top == token)
        rank = int(where[0]) + 1 if where.size else raw.rank
        if self._greedy:  # the chain's "p" is not written when it only takes the argmax
            kept_ids, kept_p = np.array([token], dtype=np.int32), np.ones(1)
        else:
            kept_ids, kept_p = raw.kept["id"], raw.kept["p"].astype(np.float64)
        shown = top[:n]
        sampled = _lookup(kept_ids, kept_p, np.append(shown, token))
        sampled, p_chosen = sampled[:-1], float(sampled[-1])
        rank_sampled = 1 + int(np.count_nonzero(kept_p > p_chosen))
        return _Step(token, raw.logprob, p_chosen, rank, rank_sampled, raw.entropy,
                     shown.copy(), raw.top_logits[:n].astype(np.float64) - raw.log_total, sampled)

    def steps(self, piece: Callable[[int], str], chosen: Sequence[str]) -> tuple[TokenProbs, ...]:
        """The first len(chosen) steps as TokenProbs: the chosen tokens named by `chosen` (the
        reply's pieces, which join into its text), the candidates by `piece`."""
        return tuple(
            TokenProbs(s.token, name, s.logprob, s.p_sampled, s.rank, s.rank_sampled, s.entropy,
                       tuple(Candidate(int(i), piece(int(i)), float(lp), float(ps))
                             for i, lp, ps in zip(s.top_ids, s.top_logprobs, s.top_sampled)))
            for s, name in zip(self.taken, chosen))

    def close(self) -> None:
        self._sampler.close()


def _lookup(ids: np.ndarray, p: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """p of each wanted id among `ids`, 0 where absent."""
    if len(ids) <= 64:  # the usual case: a few dozen survivors
        index = {int(i): float(x) for i, x in zip(ids, p)}
        return np.array([index.get(int(w), 0.0) for w in wanted])
    order = np.argsort(ids)
    at = np.searchsorted(ids, wanted, sorter=order).clip(max=len(ids) - 1)
    found = order[at]
    return np.where(ids[found] == wanted, p[found], 0.0)
