"""Figures that come from outside and are used in arithmetic: token log-probabilities from a
llama-server's answer or an edited turn record, and a machine cache edited by hand. Each is
checked where it enters (a logprob finite and at most 0), so the confidence view's exp() of
it never overflows and a cached figure of the wrong type is measured again, never a crash."""

from __future__ import annotations

import json
import math

import pytest

from chatapp import paths
from chatapp.engine.machine import bandwidth
from chatapp.engine.sampling import Candidate, TokenProbs, confidence, probs_from_json
from chatapp.engine.server import answers
from chatapp.engine.server.answers import WrongAnswer, decode

WHERE = "http://127.0.0.1:8080/completion"


@pytest.mark.parametrize(("event", "said"), [
    ({"completion_probabilities": [{"id": 1, "logprob": 1000.0}]},
     "completion_probabilities[0].logprob: expected `float` <= 0.0"),
    ({"completion_probabilities": [{"id": 1, "logprob": -1e999}]}, "completion_probabilities[0].logprob: "),
    ({"completion_probabilities": [{"id": 1, "logprob": -1.0, "top_logprobs": [{"id": 2, "logprob": 0.5}]}]},
     "completion_probabilities[0].top_logprobs[0].logprob: expected `float` <= 0.0"),
])
def test_a_server_logprob_above_0_or_not_finite_is_a_wrong_answer(event, said):
    content = json.dumps(event).replace("-Infinity", "-1e999").encode()
    with pytest.raises(WrongAnswer) as caught:
        decode(answers.Event, content, WHERE)
    assert f"{WHERE} did not answer as a llama-server: {said}" in caught.value.one_line()
    fine = decode(answers.Event, b'{"completion_probabilities":[{"id":1,"logprob":-0.0}]}', WHERE)
    assert fine.completion_probabilities[0].logprob == 0.0


STEP = TokenProbs(42, "cat", -0.25, 0.8, 1, None, 2.5, (Candidate(42, "cat", -0.25, 0.8),))


@pytest.mark.parametrize("edit", [
    {"logprob": 1000.0}, {"logprob": float("nan")}, {"logprob": float("inf")}, {"logprob": float("-inf")},
    {"logprob": True}, {"p_sampled": 1.5}, {"p_sampled": -0.1}, {"entropy": -1.0}, {"entropy": float("inf")},
    {"top": [{"id": 1, "token": "x", "logprob": 800.0}]},
])
def test_an_edited_records_logprobs_read_as_none_rather_than_overflow(edit):
    assert probs_from_json([STEP.to_json()]) == (STEP,)
    edited = json.loads(json.dumps([{**STEP.to_json(), **edit}]))  # as the record holds them
    assert probs_from_json(edited) == ()  # no shading, rather than an exp() that overflows


def test_a_very_unlikely_reply_has_an_infinite_perplexity_not_an_overflow():
    steps = [TokenProbs(1, "x", -800.0, None, None, None, None, ())] * 3
    seen = confidence(steps)
    assert seen.perplexity == math.inf and "perplexity inf" in seen.describe()
    assert steps[0].p == 0.0


@pytest.mark.parametrize("entry", [
    {"gbps": "12", "threads": 1, "buffer_bytes": 1, "passes": 1, "seconds": 0.1},
    {"gbps": float("nan"), "threads": 1, "buffer_bytes": 1, "passes": 1, "seconds": 0.1},
    {"gbps": 12.0, "threads": True, "buffer_bytes": 1, "passes": 1, "seconds": 0.1},
    "twelve",
])
def test_an_edited_bandwidth_cache_is_measured_again(entry):
    path = paths.cache_dir() / bandwidth.CACHE_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"format": bandwidth.FORMAT, "machines": {bandwidth.machine_key(): {"1": entry}}}))
    assert bandwidth.cached(1) is None
    path.write_text(json.dumps({"format": bandwidth.FORMAT, "machines": {bandwidth.machine_key(): "not a table"}}))
    assert bandwidth.cached(1) is None
    bandwidth.remember(bandwidth.Bandwidth(10.0, 1, 1 << 20, 2, 0.01))  # over the edited entry, not a TypeError
    assert bandwidth.cached(1).gbps == 10.0
    path.write_text("[" * 200_000 + "]" * 200_000)
    assert bandwidth.cached(1) is None
