"""GBNF for a JSON schema, by llama.cpp's own converter as llama-cpp-python ships it
(`llama_cpp.llama_grammar.json_schema_to_gbnf`), with two gaps of that older copy closed so
that what it lets through is valid JSON of the schema:

- its string characters admit raw control characters (a newline inside a string), which JSON
  forbids unescaped (RFC 8259, section 7): the `char` rule is put back as JSON defines it;
- it drops an integer's `minimum`/`maximum` (its own TODO): a bounded integer with few values
  is given to it as the `enum` of those values, which it does keep. Wider ranges and bounds on
  non-integers are not kept by the grammar; the check after the turn (chatapp.engine.shape) says so.
"""

from __future__ import annotations

import json
from typing import Any

from llama_cpp.llama_grammar import json_schema_to_gbnf

from chatapp.errors import InputError

ENUM_MOST = 256
"""The widest integer range given to the converter as an enum (an alternative per value)."""

_BINDING_CHAR = r'char ::= [^"\\] |'
_JSON_CHAR = r'char ::= [^"\\\x7F\x00-\x1F] |'  # no raw control character, as llama.cpp's newer converter


def _bounded(low: Any, high: Any, schema: dict) -> range | None:
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in (low, high)):
        return None
    low += 1 if "exclusiveMinimum" in schema and "minimum" not in schema else 0
    high -= 1 if "exclusiveMaximum" in schema and "maximum" not in schema else 0
    return range(low, high + 1) if 0 < high - low + 1 <= ENUM_MOST else None


def with_small_ranges_as_enums(schema: Any) -> Any:
    """The schema with each integer of at most ENUM_MOST allowed values written as their enum."""
    if isinstance(schema, list):
        return [with_small_ranges_as_enums(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: (v if k in ("enum", "const", "default", "examples") else with_small_ranges_as_enums(v))
           for k, v in schema.items()}
    if out.get("type") == "integer":
        values = _bounded(out.get("minimum", out.get("exclusiveMinimum")),
                          out.get("maximum", out.get("exclusiveMaximum")), out)
        if values is not None:
            out = {k: v for k, v in out.items() if k not in ("type", "minimum", "maximum", "exclusiveMinimum",
                                                            "exclusiveMaximum")} | {"enum": list(values)}
    return out


def schema_gbnf(schema: dict) -> str:
    """GBNF whose `root` is a JSON value of `schema` (see the module's docstring)."""
    try:
        rules = json_schema_to_gbnf(json.dumps(with_small_ranges_as_enums(schema)))
    except (AssertionError, KeyError, ValueError, TypeError, RecursionError) as exc:  # the converter asserts
        raise InputError(f"llama.cpp's schema converter cannot make a grammar of this schema: {exc}") from None
    if _BINDING_CHAR in rules:
        rules = rules.replace(_BINDING_CHAR, _JSON_CHAR, 1)
    return rules


def call_gbnf(schema: dict, prefix: str = "", suffix: str = "") -> str:
    """GBNF for `prefix` + a JSON value of `schema` + `suffix` (a tool call's grammar,
    chatapp.engine.tools.grammar; a reply's shape, chatapp.engine.shape, has neither)."""
    rules = schema_gbnf(schema).replace("root ::=", "call ::=", 1)
    return f"root ::= {json.dumps(prefix)} call {json.dumps(suffix)}\n" + rules
