"""A small Markov chain whose exact joint distribution is known, to check that chains of
drafts keep the output distributed exactly as without them."""

from __future__ import annotations

import itertools

import numpy as np


VOCAB = 4


# p(next | previous): each row favours previous + 1, so drafts of the cycle are often right.
MARKOV = np.array([[0.10, 0.60, 0.20, 0.10],
                   [0.15, 0.05, 0.55, 0.25],
                   [0.30, 0.10, 0.05, 0.55],
                   [0.50, 0.20, 0.20, 0.10]])


IDS4 = np.arange(VOCAB)


LENGTH = 3


def exact_joint(start: int = 0) -> np.ndarray:
    joint = np.zeros((VOCAB,) * LENGTH)
    for seq in itertools.product(range(VOCAB), repeat=LENGTH):
        prob, prev = 1.0, start
        for token in seq:
            prob *= MARKOV[prev, token]
            prev = token
        joint[seq] = prob
    return joint
