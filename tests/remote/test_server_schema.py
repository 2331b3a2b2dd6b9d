"""Replies in a shape over `--server`: the schema goes to a real llama-server as `json_schema`
(it makes the grammar with llama.cpp's C++ converter), a GBNF file as `grammar`; each reply is
checked after the turn as in process, and what the server cannot report is said."""

from __future__ import annotations

import json

import jsonschema
import pytest

from chatapp.engine.backend import GenerationSettings
from chatapp.engine.opening import connect_engine
from chatapp.engine.server.backend import GRAMMAR_NOT_REPORTED
from chatapp.engine.shape import ReplyShape
from tests.engine.local.schema_set import SCHEMAS

SERVER_MAX_TOKENS = 192
"""More room than in process: the server's converter (llama.cpp's C++ one) lets whitespace and
up to 16 digits on each side of a number's point through, and the model takes them (a point's
coordinates came out 40 tokens each)."""


@pytest.fixture(scope="module")
def engine(llama_server):
    from .conftest import SETTINGS

    opened = connect_engine(SETTINGS.replace(server=llama_server.url, system_prompt=""))
    yield opened
    opened.close()


def shaped(engine, ask: str, shape: ReplyShape, max_tokens: int = SERVER_MAX_TOKENS):
    engine.new_chat()
    engine.generation = GenerationSettings(temperature=0.0, max_tokens=max_tokens, shape=shape)
    return list(engine.send(ask))[-1].record


def test_every_schema_of_the_fixed_set_gives_a_valid_reply_through_the_server(engine):
    failures = []
    for case in SCHEMAS:
        record = shaped(engine, case["ask"], ReplyShape(schema=case["schema"]))
        if not record.extra.get("schema_valid") or record.finish_reason != "stop":
            failures.append((case["schema"], record.reply, record.finish_reason, record.extra.get("schema_error")))
        else:
            jsonschema.validate(json.loads(record.reply), case["schema"])
        assert record.extra["grammar_ms"] is None and record.extra["grammar_not_reported"] == GRAMMAR_NOT_REPORTED
    assert failures == []


def test_without_the_schema_the_server_does_not_answer_in_json(engine):
    engine.new_chat()
    engine.generation = GenerationSettings(temperature=0.0, max_tokens=24)
    reply = list(engine.send(SCHEMAS[0]["ask"]))[-1].record.reply
    with pytest.raises(json.JSONDecodeError):
        json.loads(reply)


def test_a_gbnf_grammar_goes_to_the_server(engine):
    record = shaped(engine, "Is water wet?", ReplyShape(gbnf='root ::= ("yes" | "no") "."\n'))
    assert record.reply in ("yes.", "no.") and "schema_valid" not in record.extra


def test_ask_over_the_server_says_what_it_cannot_report(chatapp_run, llama_server):
    out = chatapp_run("ask", "Invent a person.", "--server", llama_server.url, "--schema", "name, age int",
                      "--temperature", "0", "--max-tokens", "40", "--incognito")
    assert out.returncode == 0, out.stderr
    assert "schema: the reply is valid" in out.stderr and GRAMMAR_NOT_REPORTED in out.stderr
