"""answers.decode: llama-server's answers as typed structures, and any other shape as one line
naming the field. The real answers come from a real server in tests/remote; these are the
shapes no llama-server sends, which only a test can."""

from __future__ import annotations

import pytest

from chatapp.engine.server import answers
from chatapp.engine.server.answers import WrongAnswer, decode

WHERE = "http://127.0.0.1:8080/tokenize"


def test_a_real_tokenization_decodes_with_its_bytes():
    got = decode(answers.Pieces, b'{"tokens":[{"id":2756,"piece":"\xc3\xa9"},{"id":5,"piece":[226,128]}]}', WHERE)
    assert [(t.id, t.data()) for t in got.tokens] == [(2756, "é".encode()), (5, b"\xe2\x80")]


@pytest.mark.parametrize(("content", "said"), [
    (b"[1,2,3]", "the answer: expected `object`, got `array`"),
    (b'{"tokens":[{"id":"abc","piece":"x"}]}', "tokens[0].id: expected `int`, got `str`"),
    (b'{"tokens":[{"piece":"x"}]}', "tokens[0]: object missing required field `id`"),
    (b'{"tokens":[{"id":1,"piece":[300]}]}', "tokens[0].piece[0]: expected `int` <= 255"),
    (b'{"tokens":[{"id":-1,"piece":"x"}]}', "tokens[0].id: expected `int` >= 0"),
    (b'{"tokens":[{"id":99999999999,"piece":"x"}]}', "tokens[0].id: expected `int` <= 2147483647"),
    (b'{"tokens":[{"id":1.5,"piece":"x"}]}', "tokens[0].id: expected `int`, got `float`"),
])
def test_a_wrong_shape_names_its_field(content, said):
    with pytest.raises(WrongAnswer) as caught:
        decode(answers.Pieces, content, WHERE)
    assert caught.value.one_line() == f"Server: {WHERE} did not answer as a llama-server: {said}"


@pytest.mark.parametrize("content", [b"not json", b'{"content":""} trailing', b'{"content":"\\ud800"}'])
def test_what_is_not_json_says_so(content):
    with pytest.raises(WrongAnswer, match="did not answer with JSON: is it a llama-server"):
        decode(answers.Detokenized, content, WHERE)


@pytest.mark.parametrize(("content", "said"), [
    (b'{"error":"boom"}', "error: expected `object | null`, got `str`"),
    (b'{"error":{"code":"abc"}}', "error.code: expected `int`, got `str`"),
    (b'{"prompt_progress":{"total":"x"}}', "prompt_progress.total: expected `int`, got `str`"),
    (b'{"prompt_progress":{"total":5,"cache":0,"processed":9,"time_ms":1}}',
     "prompt_progress: cache and processed must not exceed total"),
    (b'{"timings":"none"}', "timings: expected `object | null`, got `str`"),
    (b'{"timings":{"predicted_ms":1e999}}', "timings.predicted_ms: number out of range"),
    (b'{"tokens":5}', "tokens: expected `array`, got `int`"),
    (b"[]", "the answer: expected `object`, got `array`"),
])
def test_a_stream_event_of_the_wrong_shape_names_its_field(content, said):
    with pytest.raises(WrongAnswer) as caught:
        decode(answers.Event, content, "U/completion")
    assert str(caught.value) == f"U/completion did not answer as a llama-server: {said}"


def test_fields_chatapp_does_not_read_are_let_through():
    event = decode(answers.Event, b'{"content":"hi","tokens":[42],"index":0,"new_field":{"x":[1]}}', WHERE)
    assert (event.content, event.tokens, event.stop, event.timings) == ("hi", [42], False, None)
