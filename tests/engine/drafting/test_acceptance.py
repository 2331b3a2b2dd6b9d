"""The acceptance rule against exact distributions, with wrong rules to show the test can fail."""

from __future__ import annotations


import numpy as np
import pytest

from tests.engine.drafting.acceptance import accept_draft, draw
from tests.engine.drafting import chi_square
from tests.engine.drafting.markov import IDS4, LENGTH, MARKOV, VOCAB, exact_joint

IDS = np.array([10, 11, 12, 13, 14])
P = np.array([0.30, 0.25, 0.20, 0.15, 0.10])
N = 20_000


def always_accept(ids, probs, d, rng):
    return d, True


def resample_keeping_draft(ids, probs, d, rng):
    """Accept with p(d), but on rejection draw from p itself: d comes out too often."""
    if rng.random() < probs[ids == d].sum():
        return d, True
    return draw(ids, probs, rng), False


def sample_and_compare(ids, probs, d, rng):
    """Draw from p, accept iff the draw is the draft: the form the decoder uses."""
    x = draw(ids, probs, rng)
    return x, x == d


def outputs(rule, draft, seed=1):
    rng = np.random.default_rng(seed)
    counts = dict.fromkeys(IDS.tolist(), 0)
    accepted = 0
    for _ in range(N):
        token, ok = rule(IDS, P, draft, rng)
        counts[token] += 1
        accepted += ok
        assert not ok or token == draft
    return np.array([counts[i] for i in IDS.tolist()]), accepted


@pytest.mark.parametrize("draft", [10, 14, 99], ids=["likely", "unlikely", "not-a-candidate"])
@pytest.mark.parametrize("rule", [accept_draft, sample_and_compare])
def test_right_rules_keep_the_distribution_and_accept_with_p_of_the_draft(rule, draft):
    counts, accepted = outputs(rule, draft)
    assert chi_square.passes(counts, N * P)
    p_draft = P[IDS == draft].sum()
    # The acceptance count is binomial(N, p(d)): within 5 standard deviations.
    assert abs(accepted - N * p_draft) <= 5 * np.sqrt(N * p_draft * (1 - p_draft)) + 1e-9


@pytest.mark.parametrize("rule", [always_accept, resample_keeping_draft])
def test_wrong_rules_fail_the_same_test(rule):
    counts, _ = outputs(rule, draft=12)
    assert not chi_square.passes(counts, N * P)


def test_temperature_zero_accepts_exactly_the_argmax():
    rng = np.random.default_rng(0)
    argmax = (np.array([7]), np.array([1.0]))  # the greedy chain's distribution: a point mass
    assert all(accept_draft(*argmax, 7, rng) == (7, True) for _ in range(100))
    assert all(accept_draft(*argmax, 8, rng) == (7, False) for _ in range(100))


# --- chains of drafts ---------------------------------------------------------------------

def cycle_drafts(previous: int, k: int) -> list[int]:
    """A deterministic drafter: the cycle after the last token."""
    return [(previous + 1 + i) % VOCAB for i in range(k)]


def chain_step(rule, previous: int, k: int, rng) -> list[int]:
    """Verify k drafts in order; emit the accepted ones and the token at the first rejection,
    or a bonus token drawn after the last draft when all are accepted."""
    out, prev = [], previous
    for d in cycle_drafts(previous, k):
        token, ok = rule(IDS4, MARKOV[prev], d, rng)
        out.append(token)
        if not ok:
            return out
        prev = token
    out.append(draw(IDS4, MARKOV[prev], rng))
    return out


def joint_counts(rule, k: int, trials: int, seed: int = 7) -> np.ndarray:
    rng = np.random.default_rng(seed)
    counts = np.zeros((VOCAB,) * LENGTH)
    for _ in range(trials):
        seq = [0]
        while len(seq) <= LENGTH:
            seq.extend(chain_step(rule, seq[-1], k, rng))
        counts[tuple(seq[1:LENGTH + 1])] += 1
    return counts



@pytest.mark.parametrize("k", [1, 2, 3])
@pytest.mark.parametrize("rule", [accept_draft, sample_and_compare])
def test_chains_of_drafts_keep_the_joint_distribution(rule, k):
    trials = 20_000
    assert chi_square.passes(joint_counts(rule, k, trials).ravel(), trials * exact_joint().ravel())


@pytest.mark.parametrize("rule", [always_accept, resample_keeping_draft])
def test_wrong_rules_break_the_joint_distribution(rule):
    trials = 20_000
    assert not chi_square.passes(joint_counts(rule, 2, trials).ravel(), trials * exact_joint().ravel())


@pytest.mark.parametrize(("chi2", "df", "tail"), [(3.841, 1, 0.05), (5.991, 2, 0.05), (7.815, 3, 0.05),
                                                (11.070, 5, 0.05), (82.529, 63, 0.05), (6.635, 1, 0.01)])
def test_p_value_matches_printed_tables(chi2, df, tail):
    assert chi_square.p_value(chi2, df) == pytest.approx(tail, rel=2e-3)
