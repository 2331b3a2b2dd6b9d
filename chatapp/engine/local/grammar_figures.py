"""What a reply's grammar did, for its turn record: its time apart from decode, and per sampled
token the vocabulary entries it allowed and the probability mass it cut (Sampler.grammar_steps)."""

from __future__ import annotations

from collections.abc import Sequence


def grammar_record(steps: Sequence[tuple[int | None, float | None, float]]) -> dict:
    """The grammar's time over the tokens sampled under it, the end-of-generation token's
    included (forced reply tokens are not sampled); {} without a grammar. With the mask counted
    (GenerationSettings.grammar_mask), one entry per such token: the entries allowed, the mass cut;
    a token the grammar allowed alone was forced by it."""
    if not steps:
        return {}
    allowed, cut, seconds = zip(*steps)
    total_ms = sum(seconds) * 1000
    record = {"grammar_ms": round(total_ms, 3), "grammar_ms_per_token": round(total_ms / len(steps), 4)}
    if all(a is not None for a in allowed):
        record |= {"grammar_allowed": list(allowed), "grammar_cut": [round(c, 6) for c in cut],
                   "grammar_forced": sum(1 for a in allowed if a == 1)}
    return record
