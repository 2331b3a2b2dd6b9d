"""Prompt-lookup drafting over token ids."""

from __future__ import annotations

import random

import pytest

from chatapp.engine.drafting.lookup import AGREEMENT_CAP, NO_DRAFT, Draft, NgramDrafter


def agreement(tokens, start):
    count = 0
    while count < min(AGREEMENT_CAP, start) and tokens[start - count - 1] == tokens[len(tokens) - count - 1]:
        count += 1
    return count


def brute_force(tokens, k, n_max, n_min, previous=None):
    """The definition, read literally: the latest earlier occurrence of the longest suffix, or where
    the previous draft copied from (`previous`: its start and the context's length then), moved on
    by the tokens since, when that agrees further back. Returns the draft, n and its start."""
    for n in range(n_max, n_min - 1, -1):
        if len(tokens) < n:
            continue
        suffix = tokens[-n:]
        for end in range(len(tokens) - 1, n - 1, -1):  # an occurrence ending before the last token
            if tokens[end - n:end] == suffix:
                start = end
                if previous is not None:
                    moved = previous[0] + len(tokens) - previous[1]
                    if 0 < moved < len(tokens) and agreement(tokens, moved) > agreement(tokens, end):
                        start = moved
                virtual = list(tokens)
                for j in range(k):
                    virtual.append(virtual[start + j])
                return tuple(virtual[len(tokens):]), n, start
    return (), 0, None


def test_proposes_what_followed_the_latest_match():
    drafter = NgramDrafter([1, 2, 3, 4, 9, 1, 2, 3, 5, 6, 7, 1, 2, 3], n_max=3)
    draft = drafter.draft(3)
    assert (draft.tokens, draft.match) == ((5, 6, 7), 3)  # the later "1 2 3", not the first


def test_falls_back_to_shorter_matches_and_to_nothing():
    drafter = NgramDrafter([5, 6, 7, 8, 1, 7], n_max=3, n_min=1)
    assert drafter.draft(2) == Draft((8, 1), 1, agreement=1)
    assert NgramDrafter([1, 2, 3], n_min=1).draft(4) == NO_DRAFT
    assert NgramDrafter([5, 6, 7, 8, 1, 7], n_min=2).draft(2) == NO_DRAFT


def test_agreement_says_how_far_back_the_copy_goes():
    text = list(range(100, 140))
    copying = NgramDrafter([*text, 7, 8, *text[:30]], n_max=4)
    draft = copying.draft(3)
    assert draft.tokens == (130, 131, 132) and draft.match == 4 and draft.agreement == 30
    phrase = NgramDrafter([1, 2, 3, 4, 5, 6, 9, 9, 2, 3, 4, 5], n_max=4)
    assert phrase.draft(1) == Draft((6,), 4, agreement=4)  # the token before the match differs
    long = list(range(1000, 1200))
    assert NgramDrafter([*long, 0, *long], n_max=4).draft(1).agreement == AGREEMENT_CAP


def test_a_copy_is_followed_past_an_n_gram_its_source_repeats_later():
    """Copying a function, the reply passes "\n        price =", which the source has again two lines
    down: the latest occurrence drafts from the later line, wrong from its first token."""
    source = [*range(100, 120), 7, 8, 9, 10, 200, 201, 202, *range(120, 130), 7, 8, 9, 10, 300, 301]
    context = [*source, 0]
    fresh = NgramDrafter(context + source[:24])
    assert fresh.draft(3).tokens == (300, 301, 0)  # no copy followed yet: the latest occurrence
    copying = NgramDrafter(context)
    for token in source[:24]:
        copying.append(token)
        copying.draft(4)  # as the decoder drafts at every step
    draft = copying.draft(3)
    assert draft.tokens == (200, 201, 202) and draft.agreement == 24


def test_a_repeating_pattern_drafts_its_period_out_to_k():
    assert NgramDrafter([1, 2, 1, 2, 1], n_max=2).draft(5).tokens == (2, 1, 2, 1, 2)
    assert NgramDrafter([4, 4, 4], n_max=2).draft(3).tokens == (4, 4, 4)


@pytest.mark.parametrize("seed", range(5))
def test_incremental_index_agrees_with_the_definition(seed):
    rng = random.Random(seed)
    drafter = NgramDrafter(n_max=4, n_min=1)
    tokens, previous = [], None
    for _ in range(400):
        token = rng.randrange(6)
        tokens.append(token)
        drafter.append(token)
        k = rng.randrange(1, 9)
        draft = drafter.draft(k)
        proposed, n, start = brute_force(tokens, k, 4, 1, previous)
        assert (draft.tokens, draft.match) == (proposed, n)
        if start is not None:
            assert draft.agreement == agreement(tokens, start)
            previous = (start, len(tokens))


def test_follow_extends_or_rebuilds():
    drafter = NgramDrafter([1, 2, 3, 1, 2], n_max=2)
    drafter.follow([1, 2, 3, 1, 2, 3, 9, 1, 2])
    assert drafter.draft(2).tokens == (3, 9)
    drafter.follow([7, 8, 7])  # not an extension: nothing of the old context may leak into drafts
    assert drafter.tokens == [7, 8, 7]
    assert drafter.draft(2).tokens == (8, 7)
    drafter.follow([7, 8, 7, 1, 2])
    assert drafter.draft(2) == NO_DRAFT


def test_rejects_bad_ranges():
    with pytest.raises(ValueError):
        NgramDrafter(n_max=2, n_min=3)


def copying(source, reply):
    """A drafter over `source` that has drafted after each token of `reply`, as the decoder does."""
    drafter = NgramDrafter([*source, 0])
    for token in reply:
        drafter.append(token)
        drafter.draft(4)
    return drafter


def test_a_copy_resumed_after_an_edit_keeps_the_agreement_it_had_before():
    """A rename breaks the copy for a word, and the copy goes on where it left off: counted from the
    break its agreement is 3 tokens, and the policy would bet little on it for a dozen more."""
    source = list(range(100, 160))
    renamed = [*source[:30], 900, 901, 902, *source[32:36]]  # two tokens became three, then copying again
    draft = copying(source, renamed).draft(4)
    assert draft.tokens == tuple(source[36:40])
    assert draft.agreement == 30 + 4
    unchanged = copying(source, source[:36]).draft(4)
    assert unchanged.tokens == tuple(source[36:40]) and unchanged.agreement == 36


def test_a_copy_left_for_long_or_never_followed_carries_nothing():
    source = list(range(100, 160))
    wandered = [*source[:30], *range(900, 914), *source[32:36]]  # 14 tokens of its own: a new copy
    assert copying(source, wandered).draft(4).agreement == 4
    short = [*source[:10], 900, *source[11:15]]  # 10 tokens of agreement are no copy yet
    assert copying(source, short).draft(4).agreement == 4


def test_a_resumed_copy_is_kept_when_its_last_n_gram_recurs_later_in_the_source():
    """Three tokens after an edit the copy agrees no further back than a later occurrence of its last
    n-gram does; the lookup finds that one, and the copy must not be lost to it."""
    source = list(range(100, 160))
    source[50:54] = source[32:36]  # the tokens the copy resumes with stand again further on
    renamed = [*source[:30], 900, 901, 902, *source[32:36]]
    draft = copying(source, renamed).draft(3)
    assert draft.tokens == tuple(source[36:39])
    assert draft.agreement == 30 + 4
