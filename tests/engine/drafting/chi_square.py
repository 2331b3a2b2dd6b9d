"""Pearson's chi-square test for the sampling tests, without scipy."""

from __future__ import annotations

import math

import numpy as np


def statistic(observed, expected, min_expected: float = 5.0) -> tuple[float, int]:
    """(chi-square, degrees of freedom), cells expected fewer than `min_expected` times pooled.

    A draw in a cell of expected count 0 makes the statistic infinite: the law says it cannot happen.
    """
    observed = np.asarray(observed, dtype=np.float64)
    expected = np.asarray(expected, dtype=np.float64)
    if np.any((expected == 0) & (observed > 0)):
        return math.inf, 0
    small = expected < min_expected
    obs = np.append(observed[~small], observed[small].sum())
    exp = np.append(expected[~small], expected[small].sum())
    keep = exp > 0
    obs, exp = obs[keep], exp[keep]
    return float(((obs - exp) ** 2 / exp).sum()), int(keep.sum()) - 1


def p_value(chi2: float, df: int) -> float:
    """P(X >= chi2) for X chi-square with integer df, by the closed forms (even and odd df)."""
    if math.isinf(chi2):
        return 0.0
    half = chi2 / 2.0
    if df % 2 == 0:
        terms = (i * math.log(half) - math.lgamma(i + 1) for i in range(df // 2)) if half > 0 else iter([0.0])
        return min(1.0, sum(math.exp(t - half) for t in terms))
    tail = math.erfc(math.sqrt(half))
    if half > 0:
        tail += sum(math.exp((i + 0.5) * math.log(half) - half - math.lgamma(i + 1.5)) for i in range((df - 1) // 2))
    return min(1.0, tail)


ALPHA = 1e-5
"""The tests' significance level: a right rule fails once in 100,000 seeds, a wrong one always."""


def passes(observed, expected) -> bool:
    chi2, df = statistic(observed, expected)
    return df > 0 and p_value(chi2, df) > ALPHA
