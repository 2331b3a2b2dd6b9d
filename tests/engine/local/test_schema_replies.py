"""Replies in a shape, on the real model: every schema of a fixed set (objects, arrays, enums,
bounded numbers, nesting, anyOf) gives a reply that is valid JSON of it, through llama.cpp's own
converter and grammar sampler; and the check after the turn says where a reply fails."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from chatapp.engine.backend import GenerationSettings
from chatapp.engine.local.llama import LlamaRuntime, LoadOptions
from chatapp.engine.shape import ReplyShape, check_schema
from chatapp.errors import InputError
from tests.engine.conftest import make_engine

SCHEMAS = json.loads((Path(__file__).parent / "schemas.json").read_text(encoding="utf-8"))
MAX_TOKENS = 64


@pytest.fixture(scope="module")
def one_thread_runtime(default_model_path):
    rt = LlamaRuntime(default_model_path, LoadOptions(n_ctx=512, n_threads=1, n_threads_batch=1))
    yield rt
    rt.close()


def shaped_turn(runtime, ask: str, shape: ReplyShape, max_tokens: int = MAX_TOKENS):
    engine = make_engine(runtime, "", GenerationSettings(temperature=0.0, max_tokens=max_tokens, shape=shape))
    return list(engine.send(ask))[-1].record


def test_the_fixed_set_is_broad_enough():
    assert len(SCHEMAS) >= 20
    text = json.dumps([case["schema"] for case in SCHEMAS])
    for word in ('"object"', '"array"', '"enum"', '"minimum"', '"anyOf"', '"properties": {"first"'):
        assert word in text, word


def test_every_schema_of_the_fixed_set_gives_a_valid_reply(one_thread_runtime):
    failures = []
    for case in SCHEMAS:
        shape = ReplyShape(schema=check_schema(case["schema"], "the fixed set"))
        record = shaped_turn(one_thread_runtime, case["ask"], shape)
        value = json.loads(record.reply)  # the grammar's reply is JSON, checked here independently
        jsonschema.validate(value, case["schema"])
        if not record.extra.get("schema_valid") or record.finish_reason != "stop":
            failures.append((case["schema"], record.reply, record.extra.get("schema_error")))
    assert failures == []


def test_without_the_schema_the_same_question_is_not_json(one_thread_runtime):
    """The control: the fixed set's shapes come from the grammar, not from the questions."""
    engine = make_engine(one_thread_runtime, "", GenerationSettings(temperature=0.0, max_tokens=24))
    reply = list(engine.send(SCHEMAS[0]["ask"]))[-1].record.reply
    with pytest.raises(json.JSONDecodeError):
        json.loads(reply)


def test_a_cut_reply_is_said_invalid_with_where(one_thread_runtime):
    shape = ReplyShape(schema={"type": "object", "properties": {"bio": {"type": "string"}}, "required": ["bio"]})
    record = shaped_turn(one_thread_runtime, "Write a long biography.", shape, max_tokens=6)
    assert record.finish_reason == "length"
    assert record.extra["schema_valid"] is False and record.extra["schema_error"].startswith("not JSON")


def test_a_gbnf_grammar_shapes_the_reply(one_thread_runtime):
    shape = ReplyShape(gbnf='root ::= ("yes" | "no") "."\n', source="yes-no.gbnf")
    record = shaped_turn(one_thread_runtime, "Is water wet?", shape)
    assert record.reply in ("yes.", "no.")
    assert "schema_valid" not in record.extra  # nothing to check a grammar's reply against


def test_a_grammar_llama_cpp_cannot_parse_is_one_line_before_the_prompt_is_read(one_thread_runtime):
    engine = make_engine(one_thread_runtime, "", GenerationSettings(
        temperature=0.0, max_tokens=8, shape=ReplyShape(gbnf='root ::= "a" undefined-rule\n')))
    cached = one_thread_runtime.n_cached
    with pytest.raises(InputError, match="cannot parse"):
        list(engine.send("Hello"))
    assert one_thread_runtime.n_cached == cached  # nothing was prefilled


@pytest.mark.parametrize("reply, where", [
    ('{"age": 200}', "at $.age: 200 is greater than the maximum of 120"),
    ('{"age": "old"}', "at $.age: 'old' is not of type 'integer'"),
    ('{}', "at $: 'age' is a required property"),
    ('{"age": 3', "not JSON: Expecting ',' delimiter at line 1 column 10"),
])
def test_the_check_says_where_a_reply_fails(reply, where):
    shape = ReplyShape(schema={"type": "object", "properties": {"age": {"type": "integer", "maximum": 120}},
                               "required": ["age"]})
    checked = shape.check(reply)
    assert not checked.valid and checked.error == where
    assert shape.check('{"age": 7}').valid
