"""The speculative step machine on a model whose distributions are known exactly.

A Markov chain over four tokens stands in for the model: the joint law of the reply is then a
product of known numbers, which the real model cannot give. tests/engine/local/test_speculative_llama.py
runs the same machine on llama.cpp.
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.engine.drafting.acceptance import draw
from chatapp.engine.drafting.lookup import NgramDrafter
from chatapp.engine.drafting.policy import DraftPolicy
from chatapp.engine.drafting.speculative import SpeculativeDecoder
from tests.engine.drafting import chi_square
from tests.engine.drafting.markov import IDS4, LENGTH, MARKOV, VOCAB, exact_joint
from tests.engine.drafting.always_draft import AlwaysDraft

PROMPT = [1, 2, 3, 0, 1, 2, 3, 0]


class MarkovTarget:
    """A cache of token ids; row i of the last decode is the Markov row of the i-th token decoded."""

    def __init__(self, prompt, rng, row_shift: int = 0):
        self.cache = list(prompt)
        self.rows = [prompt[-1]]
        self.rng = rng
        self.row_shift = row_shift
        self.decodes = 0

    @property
    def n_cached(self) -> int:
        return len(self.cache)

    def decode(self, tokens):
        self.cache.extend(tokens)
        self.rows = list(tokens)
        self.decodes += 1

    def sample(self, row):
        if row >= 0:
            row = min(row + self.row_shift, len(self.rows) - 1)
        return draw(IDS4, MARKOV[self.rows[row]], self.rng)

    def truncate(self, n):
        del self.cache[n:]



def reply(target, decoder, length, is_end=None):
    out = []
    decoder.begin(target.cache)
    while len(out) < length:
        step = decoder.step(max_emit=length - len(out), max_cells=1_000)
        out.extend(step.tokens)
        pending = [] if decoder.pending is None else [decoder.pending]
        ended = [out[-1]] if step.ended else []
        # The cache holds the prompt and every emitted token but the pending one and an end token.
        assert target.cache == PROMPT + out[:len(out) - len(pending) - len(ended)]
        if step.ended:
            break
    return out


def joint_counts(k_max: int, trials: int, row_shift: int = 0, seed: int = 3) -> tuple[np.ndarray, int]:
    rng = np.random.default_rng(seed)
    counts = np.zeros((VOCAB,) * LENGTH)
    accepted = 0
    for _ in range(trials):
        target = MarkovTarget(PROMPT, rng, row_shift)
        decoder = SpeculativeDecoder(target, lambda t: False, drafter=NgramDrafter(n_max=2),
                                     policy=AlwaysDraft(k_max=k_max))
        out = reply(target, decoder, LENGTH)
        counts[tuple(out[:LENGTH])] += 1
        accepted += decoder.stats.accepted
    return counts, accepted


@pytest.mark.parametrize("k_max", [1, 3])
def test_replies_keep_the_models_joint_distribution(k_max):
    trials = 20_000
    counts, accepted = joint_counts(k_max, trials)
    assert accepted > trials // 2  # the chain really ran: drafts were accepted, often
    assert chi_square.passes(counts.ravel(), trials * exact_joint(PROMPT[-1]).ravel())


def test_sampling_the_wrong_row_is_caught():
    trials = 20_000
    counts, _ = joint_counts(3, trials, row_shift=1)
    assert not chi_square.passes(counts.ravel(), trials * exact_joint(PROMPT[-1]).ravel())


def test_an_end_token_ends_the_reply_and_never_stays_in_the_cache():
    rng = np.random.default_rng(5)
    for _ in range(200):
        target = MarkovTarget(PROMPT, rng)
        decoder = SpeculativeDecoder(target, lambda t: t == 3, drafter=NgramDrafter(n_max=2),
                                     policy=AlwaysDraft(k_max=4))
        out = reply(target, decoder, 50)
        assert 3 not in target.cache[len(PROMPT):]
        assert 3 not in out[:-1]


def test_no_draft_after_an_end_token_is_verified():
    """A reply quoting the end of the user's message drafts on into the template's closing tokens;
    drafts past an end token can never be kept."""
    class Batches(MarkovTarget):
        def decode(self, tokens):
            super().decode(tokens)
            self.batches.append(list(tokens))

    rng = np.random.default_rng(5)
    ends_inside = 0
    for _ in range(200):
        target = Batches(PROMPT, rng)
        target.batches = []
        decoder = SpeculativeDecoder(target, lambda t: t == 3, drafter=NgramDrafter(n_max=2),
                                     policy=AlwaysDraft(k_max=6))
        reply(target, decoder, 50)
        assert all(3 not in batch[1:-1] for batch in target.batches)
        ends_inside += sum(batch[-1] == 3 for batch in target.batches if len(batch) > 1)
    assert ends_inside > 20  # drafts reached end tokens often, and stopped at them


def test_limits_on_tokens_and_cells_hold():
    rng = np.random.default_rng(9)
    target = MarkovTarget(PROMPT, rng)
    decoder = SpeculativeDecoder(target, lambda t: False, drafter=NgramDrafter(n_max=2),
                                 policy=AlwaysDraft(k_max=8))
    decoder.begin(PROMPT)
    for max_emit, max_cells in [(1, 10), (2, 10), (5, 3), (5, 1)]:
        before = target.n_cached
        step = decoder.step(max_emit, max_cells)
        assert len(step.tokens) <= max_emit
        assert target.n_cached - before <= max_cells
    step = decoder.step(5, 0)
    assert step.full and step.batch == 0
    assert decoder.pending == step.tokens[-1]


def test_stats_count_positions_and_each_step_decodes_once():
    rng = np.random.default_rng(11)
    target = MarkovTarget(PROMPT, rng)
    decoder = SpeculativeDecoder(target, lambda t: False, drafter=NgramDrafter(n_max=2),
                                 policy=AlwaysDraft(k_max=4))
    out = reply(target, decoder, 300)
    stats = decoder.stats
    assert stats.steps == target.decodes
    assert stats.drafted == sum(d for _, d in stats.by_position) > 0
    assert stats.accepted == sum(a for a, _ in stats.by_position)
    # Positions are reached in order: never more drafts checked at position i + 1 than accepted at i.
    for (accepted, _), (_, drafted_next) in zip(stats.by_position, stats.by_position[1:]):
        assert drafted_next <= accepted
    assert stats.tokens == target.n_cached - len(PROMPT)
    assert len(out) - stats.tokens in (0, 1)  # at most one emitted token is pending


def test_with_one_seed_the_reply_is_the_same_with_and_without_drafts():
    """Each emitted token costs one draw from the same rows, drafted or not."""
    replies = []
    for k_max in (0, 1, 3, 8):
        target = MarkovTarget(PROMPT, np.random.default_rng(21))
        decoder = SpeculativeDecoder(target, lambda t: False, drafter=NgramDrafter(n_max=2),
                                     policy=AlwaysDraft(k_max=k_max))
        replies.append(reply(target, decoder, 200))
        assert (decoder.stats.drafted > 0) == (k_max > 0)
    assert all(r == replies[0] for r in replies)


def test_steps_mark_accepted_drafts_and_can_be_kept_plain():
    target = MarkovTarget(PROMPT, np.random.default_rng(13))
    decoder = SpeculativeDecoder(target, lambda t: False, drafter=NgramDrafter(n_max=2),
                                 policy=AlwaysDraft(k_max=4))
    decoder.begin(PROMPT)
    marked = 0
    for _ in range(100):
        step = decoder.step(10, 1_000)
        assert len(step.from_draft) == len(step.tokens)
        assert sum(step.from_draft) == step.accepted
        marked += step.accepted
        plain = decoder.step(10, 1_000, draft=False)
        assert plain.drafted == 0 and plain.batch == 1 and not any(plain.from_draft)
    assert marked > 0


def test_a_step_that_verifies_no_drafts_is_looked_up_once_and_still_checked():
    """Open chat verifies no drafts on most steps. The guess such a step made, from the context the
    next token is sampled after, is that token's shadow check: the same check as a second lookup."""
    class Counted(NgramDrafter):
        def draft(self, k):
            self.calls += 1
            return super().draft(k)

    class NeverVerify(DraftPolicy):
        def choose(self, match, available, reply=None):
            return 0

        def observe(self, match, outcomes):
            if outcomes:  # a shadow check (a step's own account observes no outcomes here)
                self.checks.append((match, tuple(outcomes)))
            super().observe(match, outcomes)

    runs = []
    for look_up_again in (False, True):
        target = MarkovTarget(PROMPT, np.random.default_rng(17))
        drafter, policy = Counted(n_max=2), NeverVerify()
        drafter.calls, policy.checks = 0, []
        decoder = SpeculativeDecoder(target, lambda t: False, drafter=drafter, policy=policy)
        decoder.begin(PROMPT)
        for _ in range(100):
            if look_up_again:
                decoder._guess = None
            assert decoder.step(10, 1_000).batch == 1
        runs.append((drafter.calls, policy.checks, target.cache))
    (once, checks, cache), (twice, checks_again, cache_again) = runs
    assert (once, twice) == (101, 200)  # the first step has no earlier guess
    assert cache == cache_again
    assert len(checks) == 100 and checks == checks_again


def test_drafts_are_what_the_policy_takes_of_the_guesses_cut_at_their_first_end():
    """The decoder asks the policy before it scans the guesses for an end token; what it verifies
    must be what the policy takes of the guesses cut after their first end, in every branch of
    the policy (quoting, verbatim, budget, expected advance) and at checked sizes only."""
    end = 5
    rng = np.random.default_rng(23)
    policy = DraftPolicy(k_max=48, sizes=frozenset({2, 3, 4, 5, 6, 8, 9, 12, 16, 17, 24, 32, 33, 48, 49}))
    policy.seed({m: m ** 0.8 for m in range(2, 50)})
    policy.record_step(1, 1, 7.0)
    decoder = SpeculativeDecoder(MarkovTarget(PROMPT, rng), lambda t: t == end, policy=policy)
    taken = 0
    for _ in range(3_000):
        policy.acceptance = {b: float(rng.choice([0.3, 0.7, 0.92, 0.99])) for b in (1, 2, 3, 4, 8, 16, 32)}
        policy.lost_ms, policy.spent_ms = float(rng.choice([0.0, 5.0])), 100.0
        guesses = tuple(int(t) for t in rng.integers(0, 40 if rng.random() < 0.5 else 6, size=rng.integers(0, 49)))
        agreement, reply = int(rng.integers(1, 65)), int(rng.integers(1, 80))
        cut = guesses[:guesses.index(end) + 1] if end in guesses else guesses
        expected = cut[:policy.choose(agreement, len(cut), reply)]
        assert decoder._chosen(guesses, agreement, reply) == expected
        taken += len(expected) > 0
    assert taken > 500  # the policy drafted in many trials, not just declined
