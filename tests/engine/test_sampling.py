"""A turn record's "logprobs" read back (what a saved session's confidence view shades from)."""

from chatapp.engine.sampling import Candidate, TokenProbs, probs_from_json

STEP = TokenProbs(42, "cat", -0.25, 0.8, 1, 1, 2.5, (Candidate(42, "cat", -0.25, 0.8), Candidate(7, "dog", -1.5, 0.2)))


def test_logprobs_read_back_as_they_were_written_and_junk_reads_as_none():
    back = probs_from_json([STEP.to_json()])
    assert back == (TokenProbs(42, "cat", -0.25, 0.8, 1, None, 2.5, STEP.top),)  # rank_sampled is not written
    server = TokenProbs(5, "x", -2.0, None, None, None, None, ())
    assert probs_from_json([server.to_json()]) == (server,)
    for junk in (None, {}, "x", [{"id": 1}], [STEP.to_json(), 3], [{**STEP.to_json(), "logprob": "high"}]):
        assert probs_from_json(junk) == ()
