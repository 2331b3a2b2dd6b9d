"""Replies in a shape, on the real model: every schema of a fixed set (objects, arrays, enums,
bounded numbers, nesting, anyOf) gives a reply that is valid JSON of it, through llama.cpp's own
converter and grammar sampler; the check after the turn says where a reply fails; and the
grammar's mask figures are what llama.cpp's grammar sampler gives on the same logits."""

from __future__ import annotations

import ctypes
import json

import jsonschema
import llama_cpp
import numpy as np
import pytest

from chatapp.engine.backend import GenerationSettings, prefill_batches
from chatapp.engine.local.llama import LlamaRuntime, LoadOptions, call_gbnf
from chatapp.engine.shape import ReplyShape, check_schema
from chatapp.errors import InputError
from tests.engine.conftest import make_engine
from tests.engine.local.schema_set import SCHEMAS

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


MASKED = SCHEMAS[8]  # a city: strings, an integer, keys the grammar forces one by one


def test_the_mask_figures_equal_a_direct_count_with_llama_cpps_grammar_sampler(one_thread_runtime):
    """Replay the turn: the same prompt prefilled in the same batches, then each reply token
    decoded, and at each step a grammar sampler of llama.cpp's own (made here from the same
    GBNF) applied to every token of the same logits: the entries it leaves finite, and the
    probability of the others, are the record's figures; the turn's token is then accepted."""
    rt = one_thread_runtime
    schema = MASKED["schema"]
    engine = make_engine(rt, "", GenerationSettings(temperature=0.0, max_tokens=MAX_TOKENS, grammar_mask=True,
                                                    shape=ReplyShape(schema=schema)))
    record = list(engine.send(MASKED["ask"]))[-1].record
    reply = engine.last_reply_ids()
    prompt = rt.kv_tokens[:record.prompt_tokens]
    assert record.finish_reason == "stop"
    steps = reply + [None]  # the last step drew the end of generation
    assert len(record.extra["grammar_allowed"]) == len(record.extra["grammar_cut"]) == len(steps)

    rt.clear_kv()
    for size in prefill_batches(0, len(prompt)):
        rt.prefill(prompt[rt.n_cached:rt.n_cached + size])
    grammar = llama_cpp.llama_sampler_init_grammar(rt.vocab, call_gbnf(schema).encode(), b"root")
    counted, cuts = [], []
    try:
        for token in steps:
            logits = rt.last_logits()
            data = np.zeros(rt.n_vocab, dtype=np.dtype([("id", np.int32), ("logit", np.float32),
                                                        ("p", np.float32)], align=True))
            data["id"], data["logit"] = np.arange(rt.n_vocab), logits
            array = llama_cpp.llama_token_data_array(data=data.ctypes.data_as(llama_cpp.llama_token_data_p),
                                                     size=rt.n_vocab, selected=-1, sorted=False)
            llama_cpp.llama_sampler_apply(grammar, ctypes.byref(array))
            allowed = np.isfinite(data["logit"])
            p = np.exp(logits.astype(np.float64) - logits.max())
            counted.append(int(allowed.sum()))
            cuts.append(1 - p[allowed].sum() / p.sum())
            if token is not None:
                assert allowed[token]  # the grammar let the turn's token through
                llama_cpp.llama_sampler_accept(grammar, token)
                rt.decode_one(token)
    finally:
        llama_cpp.llama_sampler_free(grammar)
    assert record.extra["grammar_allowed"] == counted
    assert record.extra["grammar_cut"] == pytest.approx(cuts, abs=2e-6)
    assert record.extra["grammar_forced"] == counted.count(1)  # the grammar alone chose these
    assert min(counted) < 10 and max(counted) > 10_000  # a key's few spellings and a string's free text


@pytest.mark.parametrize("temperature", [0.0, 0.8])
def test_masking_only_the_best_entries_gives_the_reply_masking_every_token_gives(one_thread_runtime, temperature):
    """The fast path (greedy: the best token checked first; else the best entries by logit until
    the chain's top_k are allowed) against the grammar over the whole vocabulary, greedy and
    sampled with one seed: the same replies on the fixed set's first schemas, and the fast one
    reports no mask. Each turn starts from an empty cache: a prompt's last token run again alone
    gives logits a batch does not quite (backend.TILE_ROWS)."""
    replies = set()
    for case in SCHEMAS[:8]:
        shape = ReplyShape(schema=case["schema"])
        records = []
        for mask in (False, True):
            one_thread_runtime.clear_kv()
            engine = make_engine(one_thread_runtime, "", GenerationSettings(
                temperature=temperature, seed=7, max_tokens=MAX_TOKENS, shape=shape, grammar_mask=mask))
            records.append(list(engine.send(case["ask"]))[-1].record)
        fast, full = records
        assert fast.reply == full.reply
        assert "grammar_allowed" not in fast.extra and fast.extra["grammar_ms"] > 0
        assert len(full.extra["grammar_allowed"]) == full.generated_tokens + (full.finish_reason == "stop")
        replies.add(fast.reply)
    assert len(replies) == 8


@pytest.mark.parametrize("temperature", [0.0, 0.8])
def test_probabilities_under_a_grammar_come_from_what_it_allows(one_thread_runtime, temperature):
    """With logprobs on, every token is drawn through the grammar too: a shortlist of the best
    logits could hold none it allows, and llama.cpp aborts the process when its grammar is made
    to accept a token it refused (it did, at a string's first character)."""
    case = SCHEMAS[0]
    one_thread_runtime.clear_kv()
    engine = make_engine(one_thread_runtime, "", GenerationSettings(
        temperature=temperature, seed=7, max_tokens=MAX_TOKENS, logprobs=3, shape=ReplyShape(schema=case["schema"])))
    record = list(engine.send(case["ask"]))[-1].record
    assert record.extra["schema_valid"] and record.finish_reason == "stop"
    assert len(record.probs) == record.generated_tokens
    jsonschema.validate(json.loads(record.reply), case["schema"])
