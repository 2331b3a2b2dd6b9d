"""`ask --schema` and `--grammar` end to end through the installed script, on the real model:
the reply keeps to the shape and its record says whether it is valid; bad input is one line."""

from __future__ import annotations

import json

import jsonschema
import pytest

from tests.cli.conftest import records
from tests.cli.one_line import one_line

FAST = ("--temperature", "0", "--threads", "1", "--ctx", "512", "--incognito")


def test_the_concise_form_gives_a_valid_json_record(chatapp_exe):
    (turn,) = records(chatapp_exe("ask", "Invent a person.", "--schema", "name, age int, happy bool: are they",
                                  "--json", "--max-tokens", "48", *FAST))
    value = json.loads(turn["reply"])
    jsonschema.validate(value, {"type": "object", "required": ["name", "age", "happy"], "properties": {
        "name": {"type": "string"}, "age": {"type": "integer"}, "happy": {"type": "boolean"}}})
    assert turn["schema_valid"] is True and "schema_error" not in turn


def test_a_schema_file_and_a_cut_reply_say_where_on_stderr(chatapp_exe, tmp_path):
    schema = tmp_path / "bio.json"
    schema.write_text(json.dumps({"type": "object", "properties": {"bio": {"type": "string"}}, "required": ["bio"]}))
    out = chatapp_exe("ask", "Write a long biography.", "--schema", str(schema), "--max-tokens", "6", *FAST)
    assert out.returncode == 0, out.stderr
    assert out.stdout.lstrip().startswith("{")
    assert "schema: the reply is not valid: not JSON" in out.stderr


def test_a_gbnf_file_shapes_the_reply(chatapp_exe, tmp_path):
    grammar = tmp_path / "yes-no.gbnf"
    grammar.write_text('root ::= ("yes" | "no") "."\n')
    (turn,) = records(chatapp_exe("ask", "Is water wet?", "--grammar", str(grammar), "--json", "--max-tokens", "8",
                                  *FAST))
    assert turn["reply"] in ("yes.", "no.") and "schema_valid" not in turn


@pytest.mark.parametrize("args, said", [
    (("--schema", '{"type": "object",'), "--schema JSON: not JSON: Expecting property name"),
    (("--schema", '{"type": "frob"}'), "--schema JSON: not a valid JSON schema at $.type: 'frob' is not valid"),
    (("--schema", "name, age years"), "--schema: age's type 'years' is not one of int, float, bool, str"),
    (("--schema", "[1, 2]"), "--schema: '[1' is not a field name (letters, digits, _ and -)"),
    (("--schema", "name: a, a b c"), "--schema: 'a b c' is not `name [type][: description]`"),
    (("--schema", "a", "--grammar", "x.gbnf"), "--schema and --grammar each set the reply's shape"),
    (("--schema", "a", "--tools"), "--schema and --grammar do not go with --tool/--tools"),
    (("--grammar", "missing.gbnf"), "--grammar missing.gbnf: no such file"),
    (("--schema", "missing.json"), "--schema missing.json: no such file"),
])
def test_bad_shapes_are_one_line_and_exit_2_before_the_model_loads(chatapp_exe, args, said):
    out = chatapp_exe("ask", "Hi", *args, "--model", "/nonexistent/model.gguf")  # never loaded: refused first
    assert out.returncode == 2
    assert said in one_line(out) and out.stdout == ""


def test_a_grammar_without_root_is_one_line(chatapp_exe, tmp_path):
    grammar = tmp_path / "start.gbnf"
    grammar.write_text('start ::= "x"\n')
    out = chatapp_exe("ask", "Hi", "--grammar", str(grammar), "--model", "/nonexistent/model.gguf")
    assert out.returncode == 2 and "no `root ::= ...` rule" in one_line(out)


def test_drafting_asked_for_says_why_a_shaped_reply_goes_without_it(chatapp_exe):
    out = chatapp_exe("ask", "Invent a person.", "--schema", "name, age int", "--draft", "ngram", "--max-tokens", "40",
                      *FAST)
    assert out.returncode == 0, out.stderr
    assert "drafting off: a reply under a grammar is sampled a token at a time" in out.stderr
    assert "schema: the reply is valid" in out.stderr


def test_a_session_keeps_its_shape_until_schema_off(chatapp_exe):
    """Issue 56: --schema is kept with the session, as the TUI keeps its reply shape; a resumed
    session's replies keep to it without the flag, and `--schema off` drops it."""
    run = ("--json", "--max-tokens", "24", "--temperature", "0", "--threads", "1", "--ctx", "1024", "--session", "p")
    (first,) = records(chatapp_exe("ask", "Invent a person.", "--schema", "name, age int", *run))
    assert first["schema_valid"] is True
    resumed = chatapp_exe("ask", "Another one.", *run)
    (second,) = records(resumed)
    assert second["schema_valid"] is True and set(json.loads(second["reply"])) == {"name", "age"}
    assert "every reply is a value of the JSON schema (DSL: name, age), as it was left" in resumed.stderr
    (third,) = records(chatapp_exe("ask", "Say hello.", "--schema", "off", *run))
    assert "schema_valid" not in third
    fourth = chatapp_exe("ask", "Say hello again.", *run)
    assert "schema_valid" not in records(fourth)[0] and "as it was left" not in fourth.stderr
