"""The sampling step of each reply token, as the backends report it.

For every generated token: the model's own distribution (softmax of the logits at temperature
1, before any sampler) and the distribution the sampler chain drew from (after temperature,
top_k, top_p and min_p, renormalised), as the top candidates of the first with their
probability in the second (0 for candidates the chain removed); the chosen token's probability
and rank in both; the entropy of the model's distribution in bits.

The in-process backend computes these from the last logits row of each step
(chatapp.engine.local.probing); a llama-server reports them through `n_probs`
(chatapp.engine.server.probs). Both hand over `TokenProbs`, which `TurnRecord.probs` carries
and `to_json` writes as the `--json` record's "logprobs".
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from chatapp.errors import InputError

MAX_LOGPROBS = 20
"""The most candidates a token reports (llama-server's OpenAI API allows as many)."""
LOW = 0.10
"""A chosen token below this raw probability counts as a low-confidence one."""

BANDS: tuple[tuple[float, str], ...] = (
    (0.90, "90-100%"),
    (0.50, "50-90%"),
    (0.10, "10-50%"),
    (0.0, "below 10%"),
)
"""The confidence view's shades, by the chosen token's raw probability: (lower bound, label),
highest first. The UI maps each to a theme colour; the legend lists these labels."""


def check_logprobs(n: int) -> int:
    """`n` as a count of candidates to report, or one line saying why not."""
    if not 0 <= n <= MAX_LOGPROBS:
        raise InputError(f"--logprobs takes 0 to {MAX_LOGPROBS} candidates per token, not {n}")
    return n


def band(p: float) -> int:
    """The index in BANDS of a probability's shade."""
    for i, (lower, _label) in enumerate(BANDS):
        if p >= lower:
            return i
    return len(BANDS) - 1


@dataclass(frozen=True, slots=True)
class Candidate:
    id: int
    token: str
    logprob: float
    """Natural log of the model's own (raw) probability."""
    p_sampled: float | None
    """Probability in the distribution the chain drew from; 0 if the chain removed it, None
    where the backend cannot tell."""

    @property
    def p(self) -> float:
        return math.exp(self.logprob)

    def to_json(self) -> dict:
        return {"id": self.id, "token": self.token, "logprob": _round(self.logprob),
                "p_sampled": None if self.p_sampled is None else _round(self.p_sampled)}


@dataclass(frozen=True, slots=True)
class TokenProbs:
    """One generated token's sampling step."""

    id: int
    token: str
    logprob: float
    p_sampled: float | None
    rank: int | None
    """1 for the model's most probable token; None when the backend listed fewer candidates
    than it would take to know."""
    rank_sampled: int | None
    """The same in the distribution the chain drew from."""
    entropy: float | None
    """Of the model's own distribution, in bits; None where the backend cannot tell (a server
    gives only its top candidates)."""
    top: tuple[Candidate, ...]
    """The most probable candidates of the model's distribution, most probable first."""

    @property
    def p(self) -> float:
        return math.exp(self.logprob)

    def to_json(self) -> dict:
        return {"id": self.id, "token": self.token, "logprob": _round(self.logprob),
                "p_sampled": None if self.p_sampled is None else _round(self.p_sampled), "rank": self.rank,
                "entropy": None if self.entropy is None else _round(self.entropy),
                "top": [c.to_json() for c in self.top]}


@dataclass(frozen=True)
class Scored:
    """A reply's tokens scored after it was written (one prefill pass over it): what each
    token's probabilities were there, and what reading it back cost."""

    probs: tuple[TokenProbs, ...]
    cached: int
    """Tokens of its path the cache already held."""
    prefilled: int
    """Tokens computed: the rest of the prompt that asked for it, and the reply."""
    ms: float


def probs_from_json(data: object) -> tuple[TokenProbs, ...]:
    """A record's "logprobs" (TokenProbs.to_json each) read back; nothing when any entry is
    malformed (a damaged record shows no shading rather than wrong shading). A record is a file
    anyone may edit: a logprob must be a finite number at most 0, a probability 0 to 1, an
    entropy finite and not negative, as every backend gives them, or exp() of a logprob of 1000
    would overflow in the view that shades by it."""
    if not isinstance(data, list):
        return ()
    try:
        return tuple(
            TokenProbs(int(d["id"]), str(d["token"]), logprob(d["logprob"]), _probability(d.get("p_sampled")),
                       None if d.get("rank") is None else int(d["rank"]), None,
                       _entropy(d.get("entropy")),
                       tuple(Candidate(int(c["id"]), str(c["token"]), logprob(c["logprob"]),
                                       _probability(c.get("p_sampled")))
                             for c in d.get("top") or ()))
            for d in data)
    except (KeyError, TypeError, ValueError, AttributeError, OverflowError):
        return ()


def logprob(x: object) -> float:
    """`x` as a log-probability: a finite number at most 0; ValueError for anything else."""
    value = _number(x)
    if not -math.inf < value <= 0:
        raise ValueError(f"a logprob must be finite and at most 0, not {value!r}")
    return value


def _number(x: object) -> float:
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        raise TypeError(f"expected a number, got {type(x).__name__}")
    return float(x)


def _probability(x: object) -> float | None:
    if x is None:
        return None
    value = _number(x)
    if not 0 <= value <= 1:
        raise ValueError(f"a probability must be 0 to 1, not {value!r}")
    return value


def _entropy(x: object) -> float | None:
    if x is None:
        return None
    value = _number(x)
    if not 0 <= value < math.inf:
        raise ValueError(f"an entropy must be finite and not negative, not {value!r}")
    return value


@dataclass(frozen=True)
class Confidence:
    """A reply's confidence in one line: its mean log-probability and how many tokens were unlikely."""

    tokens: int
    mean_logprob: float
    low: int
    """Tokens whose raw probability was below LOW."""

    @property
    def perplexity(self) -> float:
        """exp(-mean logprob); infinite past what a float holds (a mean below about -709)."""
        return math.exp(-self.mean_logprob) if -self.mean_logprob < 709 else math.inf

    def describe(self) -> str:
        """E.g. "mean logprob -0.42 (perplexity 1.52), 3 of 40 tokens below 10%"."""
        return (f"mean logprob {self.mean_logprob:.2f} (perplexity {self.perplexity:.2f}), "
                f"{self.low} of {self.tokens} tokens below {LOW:.0%}")


def confidence(probs: Sequence[TokenProbs]) -> Confidence | None:
    """None for a reply without probabilities."""
    if not probs:
        return None
    return Confidence(len(probs), sum(p.logprob for p in probs) / len(probs), sum(1 for p in probs if p.p < LOW))


def _round(x: float) -> float:
    return round(float(x), 6)
