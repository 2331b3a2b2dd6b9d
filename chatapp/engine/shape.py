"""The shape a reply must have (`ask --schema`, `--grammar`): a JSON schema, given as a file,
as JSON text or in simonw/llm's concise form ('name, age int, bio'), or a GBNF grammar file;
and the check of a finished reply against its schema, which says where a reply fails.

The grammar itself is made by llama.cpp's own converter (chatapp.engine.local.llama.call_gbnf)
or by llama-server from the schema; the check after the turn uses the jsonschema package.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from chatapp.errors import InputError

DSL_TYPES = {"int": "integer", "float": "number", "bool": "boolean", "str": "string"}
"""The concise form's types, as llm names them, and the JSON schema type of each."""


def schema_from_dsl(text: str) -> dict[str, Any]:
    """llm's concise schema: fields separated by commas, or by newlines when there are any; each
    `name [type][: description]`, type int, float, bool or str (the default). Written here because
    llm is not a dependency and its parser is twenty lines; unlike llm's, an unknown type is refused
    rather than read as str, so a typo is said instead of silently changing the schema."""
    fields = [f.strip() for f in text.split("\n" if "\n" in text else ",") if f.strip()]
    if not fields:
        raise InputError("--schema: no fields (e.g. 'name, age int, bio: one sentence')")
    properties: dict[str, Any] = {}
    for field in fields:
        head, _, description = field.partition(":")
        words = head.split()
        if not words or len(words) > 2:
            raise InputError(f"--schema: {field!r} is not `name [type][: description]`")
        name, kind = words[0], words[1] if len(words) == 2 else "str"
        if not re.fullmatch(r"[\w-]+", name):
            raise InputError(f"--schema: {name!r} is not a field name (letters, digits, _ and -)")
        if kind not in DSL_TYPES:
            raise InputError(f"--schema: {name}'s type {kind!r} is not one of {', '.join(DSL_TYPES)}")
        if name in properties:
            raise InputError(f"--schema: the field {name!r} is given twice")
        properties[name] = {"type": DSL_TYPES[kind]} | ({"description": d} if (d := description.strip()) else {})
    return {"type": "object", "properties": properties, "required": list(properties)}


def _where(path) -> str:
    """A jsonschema error's place as a JSON path: `$.people[2].age`."""
    return "$" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path)


def check_schema(schema: Any, source: str) -> dict[str, Any]:
    """`schema` if it is a JSON schema (an object, valid against its draft's meta-schema)."""
    import jsonschema

    if not isinstance(schema, dict):
        raise InputError(f"--schema {source}: a schema is a JSON object, not {type(schema).__name__}")
    try:
        jsonschema.validators.validator_for(schema).check_schema(schema)
    except jsonschema.SchemaError as exc:
        raise InputError(f"--schema {source}: not a valid JSON schema at {_where(exc.path)}: {exc.message}") from None
    return schema


@dataclass(frozen=True)
class ShapeCheck:
    """A reply checked against its schema: valid, or where and why not."""

    valid: bool
    error: str = ""

    def record(self) -> dict[str, Any]:
        """The turn record's keys (ask --json)."""
        return {"schema_valid": self.valid} | ({"schema_error": self.error} if self.error else {})


@dataclass(frozen=True)
class ReplyShape:
    """A JSON schema the reply must be a value of, or GBNF text (a `root` rule) it must follow."""

    schema: dict[str, Any] | None = None
    gbnf: str = ""
    source: str = ""
    """What was given, as messages name it: a file's name, "JSON" or "DSL"."""

    def to_json(self) -> str:
        """The shape as text that `shape_from_json` reads back (kept with a session)."""
        kept = {"schema": self.schema} if self.schema is not None else {"gbnf": self.gbnf}
        return json.dumps(kept | {"source": self.source}, ensure_ascii=False)

    def describe(self) -> str:
        """E.g. "JSON schema (DSL: name, age, bio)" or "GBNF (list.gbnf)": what the header and notices say."""
        if self.schema is None:
            return f"GBNF ({self.source})"
        properties = self.schema.get("properties", {})
        fields = list(properties)[:4] if self.schema.get("type") == "object" else []
        named = f": {', '.join(fields)}" + ("…" if len(properties) > 4 else "") if fields else ""
        return f"JSON schema ({self.source}{named})"

    def check(self, reply: str) -> ShapeCheck | None:
        """The reply against the schema; None for a GBNF shape (nothing to check it with)."""
        if self.schema is None:
            return None
        import jsonschema

        try:
            value = json.loads(reply)
        except json.JSONDecodeError as exc:
            return ShapeCheck(False, f"not JSON: {exc.msg} at line {exc.lineno} column {exc.colno}")
        error = jsonschema.exceptions.best_match(jsonschema.validators.validator_for(self.schema)(
            self.schema).iter_errors(value))
        return ShapeCheck(True) if error is None else ShapeCheck(False, f"at {_where(error.path)}: {error.message}")


def schema_shape(given: str) -> ReplyShape:
    """`--schema FILE|JSON|DSL`: a file's JSON schema when `given` names a file, JSON text when it
    starts with `{`, else llm's concise form."""
    text, source = given, "DSL"
    one_word = not given.lstrip().startswith("{") and "," not in given and "\n" not in given
    if one_word and Path(given).expanduser().is_file():
        text, source = _read(Path(given).expanduser(), "--schema"), Path(given).name
    elif one_word and (given.endswith(".json") or "/" in given):  # meant as a file: not a field's name
        raise InputError(f"--schema {given}: no such file")
    if text.lstrip().startswith("{"):
        try:
            schema = json.loads(text)
        except json.JSONDecodeError as exc:
            raise InputError(f"--schema {source if source != 'DSL' else 'JSON'}: not JSON: {exc.msg} at line "
                             f"{exc.lineno} column {exc.colno}") from None
        source = "JSON" if source == "DSL" else source
    elif source != "DSL":
        raise InputError(f"--schema {source}: the file holds no JSON object")
    else:
        schema = schema_from_dsl(text)
    return ReplyShape(schema=check_schema(schema, source), source=source)


def grammar_shape(file: str) -> ReplyShape:
    """`--grammar FILE`: a GBNF grammar with a `root` rule (llama.cpp parses it when the turn starts)."""
    path = Path(file).expanduser()
    if not path.is_file():
        raise InputError(f"--grammar {file}: no such file")
    return gbnf_shape(_read(path, "--grammar"), path.name)


def gbnf_shape(text: str, source: str = "GBNF") -> ReplyShape:
    """GBNF text as a shape: it needs a `root` rule (llama.cpp parses the rest when the turn starts)."""
    if not any(line.split("::=")[0].strip() == "root" for line in text.splitlines() if "::=" in line):
        raise InputError(f"--grammar {source}: no `root ::= ...` rule (GBNF starts from root)")
    return ReplyShape(gbnf=text, source=source)


def shape_from_json(text: str) -> ReplyShape:
    """A shape `ReplyShape.to_json` wrote, checked again as when it was given (a session file
    edited since is refused in one line, not trusted)."""
    try:
        kept = json.loads(text)
    except ValueError:
        kept = None
    if not isinstance(kept, dict) or not isinstance(kept.get("source", ""), str):
        raise InputError("the kept reply shape is not one chatapp wrote")
    source = kept.get("source") or "JSON"
    if isinstance(kept.get("gbnf"), str):
        return gbnf_shape(kept["gbnf"], source)
    return ReplyShape(schema=check_schema(kept.get("schema"), source), source=source)


def _read(path: Path, option: str) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{option} {path.name}: cannot be read: {exc}") from None
