"""The tool-call formats of the model families llama.cpp ships templates for: one table, each
entry the marker its calls start with and the reader of what follows (after llama.cpp's
common/chat.cpp, which keeps one parser per family the same way).

Each format here is the one the family's own template writes when it renders an assistant
message's `tool_calls` (tests/engine/tools/test_call_formats.py renders every template in
llama.cpp's models/templates/ and reads the call back). Three kinds:

- JSON arguments after a family's header: Kimi K2 (`functions.NAME:0`), DeepSeek R1 and V3.1,
  Devstral / Magistral / Mistral Small 3.2
  (`[TOOL_CALLS]NAME[CALL_ID]...[ARGS]`), gpt-oss harmony (`to=functions.NAME ...
  <|message|>`), Solar, Functionary v3.1 (`<function=NAME>`) and v3.2 (`NAME` on the reply's first line:
  only a tool offered), GigaChat;
- JSON objects or lists of them: Hermes / Qwen 2.5 (`<tool_call>`), Mistral Nemo, Apriel and
  MiniMax M1 (`<tool_calls>`), Nemotron Nano v2 (`<TOOLCALL>`), Granite (`<|tool_call|>`),
  Command R7B (`<|START_ACTION|>`), FireFunction v2 (` functools[...]`), Apertus
  (`{NAME: arguments}`);
- arguments as XML text, typed by the tool's schema: Qwen3-Coder / Qwen3.5 / Nemotron 3 /
  Seed-OSS (`<function=NAME><parameter=K>`), GLM 4.5+ / Laguna / Ling / Hunyuan
  (`<arg_key>`/`<arg_value>`), MiniMax M2 / DeepSeek V3.2+ DSML / Glimmer (`<invoke name=...>`),
  MiniCPM 5 (`<param name=...>`), Kimi K3; and two more: Gemma 4's `call:NAME{k:<|"|>v<|"|>}`
  and LFM2's Python-style `[NAME(k='v')]`.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from chatapp.engine.tools.spec import ToolCall

Types = Mapping[str, Mapping[str, str]]
"""Tool name -> argument name -> its JSON schema type, for the formats whose arguments are text."""

_DECODER = json.JSONDecoder()


def json_values(text: str) -> Iterator[Any]:
    """The JSON values at the start of `text`, one after another (blanks and commas between)."""
    at = 0
    while True:
        while at < len(text) and text[at] in " \t\r\n,":
            at += 1
        try:
            value, at = _DECODER.raw_decode(text, at)
        except (ValueError, RecursionError):
            return
        yield value


def first_json(text: str) -> Any:
    return next(json_values(text), None)


def call_of(value: Any) -> ToolCall | None:
    """A call from one JSON object in any of the families' shapes: `name` with `arguments` (or
    `parameters`, or OpenAI's arguments as a JSON string), Command R7B's `tool_name`, or Apertus's
    `{NAME: arguments}`."""
    if not isinstance(value, dict):
        return None
    name = value.get("name", value.get("tool_name"))
    if not isinstance(name, str):
        if len(value) == 1 and isinstance(next(iter(value.values())), dict):  # Apertus
            name, arguments = next(iter(value.items()))
            return ToolCall(name, arguments)
        return None
    arguments = value.get("arguments", value.get("parameters", {}))
    if isinstance(arguments, str):
        arguments = first_json(arguments)
    if not isinstance(arguments, dict):
        return None
    return ToolCall(name, arguments, str(value.get("id", value.get("tool_call_id", ""))))


def _objects(text: str) -> list[ToolCall]:
    """Calls written as JSON objects or lists of them, one after another."""
    calls = []
    for value in json_values(text):
        for item in value if isinstance(value, list) else [value]:
            if (call := call_of(item)) is not None:
                calls.append(call)
    return calls


def _typed(raw: str, kind: str | None) -> Any:
    """An argument written as text: kept as text where the schema says string, else read as JSON
    where it reads (2, true, [1]), as llama.cpp's XML-style parsers convert it."""
    text = raw.removeprefix("\n").removesuffix("\n")
    if kind == "string":
        return text
    try:
        value = json.loads(text)
    except ValueError:
        return text
    return value if kind is not None or not isinstance(value, str) else text


def _xml(call: str, param: str, *, strip_key: bool = True) -> Callable[[str, Types], list[ToolCall]]:
    """A reader for calls matched by `call` (groups: name, body) whose arguments the body holds
    as matches of `param` (groups: key, value; or key, a string="true|false" flag, value)."""
    calls_re, param_re = re.compile(call, re.S), re.compile(param, re.S)

    def read(text: str, types: Types) -> list[ToolCall]:
        calls = []
        for match in calls_re.finditer(text):
            name = match.group(1).strip()
            known = types.get(name, {})
            arguments: dict[str, Any] = {}
            params = list(param_re.finditer(match.group(2)))
            if not params and match.group(2).strip():
                continue  # the body is another family's (Functionary's JSON after <function=NAME>)
            for found in params:
                key = found.group(1).strip() if strip_key else found.group(1)
                if len(found.groups()) == 3:  # DSML says whether the value is a string
                    kind = "string" if found.group(2) == "true" else known.get(key, "json")
                    arguments[key] = _typed(found.group(3), kind)
                else:
                    arguments[key] = _typed(found.group(2), known.get(key))
            calls.append(ToolCall(name, arguments))
        return calls

    return read


def _headed(header: str) -> Callable[[str, Types], list[ToolCall]]:
    """A reader for calls whose header (`header`, group 1: the name) is followed by the
    arguments as one JSON object."""
    header_re = re.compile(header, re.S)

    def read(text: str, types: Types) -> list[ToolCall]:
        calls = []
        for match in header_re.finditer(text):
            arguments = first_json(text[match.end():])
            if isinstance(arguments, dict):
                calls.append(ToolCall(match.group(1).strip(), arguments))
        return calls

    return read


def _after(marker: str) -> Callable[[str, Types], list[ToolCall]]:
    """Calls as JSON objects (or lists) after each `marker`."""
    def read(text: str, types: Types) -> list[ToolCall]:
        return [call for part in text.split(marker)[1:] for call in _objects(part)]

    return read


_MINIMAX3_SEP = "]<]minimax[>["


def _minimax3(text: str, types: Types) -> list[ToolCall]:
    """MiniMax M3: `<invoke name=N>` with each argument an element named after it, between
    separators its template writes."""
    clean = text.replace(_MINIMAX3_SEP, "")
    return _xml(r'<invoke name="([^"]+)">(.*?)</invoke>', r"<([^/<>\s]+)>(.*?)</\1>")(clean, types)


def _gemma4(text: str, types: Types) -> list[ToolCall]:
    """Gemma 4: `call:NAME{key:<|"|>text<|"|>,n:2}`: keys bare, strings between `<|"|>` marks."""
    calls = []
    for match in re.finditer(r"call:([\w.-]+)\{", text):
        body, at, depth, out = text[match.end() - 1:], 0, 0, []
        while at < len(body):
            if body.startswith('<|"|>', at):
                end = body.find('<|"|>', at + 5)
                if end < 0:
                    break
                out.append(json.dumps(body[at + 5:end]))
                at = end + 5
                continue
            char = body[at]
            depth += (char in "{[") - (char in "}]")
            key = re.match(r"[A-Za-z_][\w.-]*(?=\s*:)", body[at:]) if char not in "{}[],:" else None
            if key and (not out or out[-1] in ("{", ",")):
                out.append(json.dumps(key.group(0)))
                at += key.end()
                continue
            out.append(char)
            at += 1
            if depth == 0:
                break
        value = first_json("".join(out))
        if isinstance(value, dict):
            calls.append(ToolCall(match.group(1), value))
    return calls


def _pythonic(text: str, types: Types) -> list[ToolCall]:
    """LFM2: `[NAME(key='text', n=2), ...]`, read with Python's own parser, values as literals."""
    inside = text.split("<|tool_call_end|>", 1)[0].strip()
    try:
        tree = ast.parse(inside, mode="eval").body
    except (SyntaxError, ValueError, RecursionError):
        return []
    calls = []
    for node in tree.elts if isinstance(tree, ast.List) else [tree]:
        if not (isinstance(node, ast.Call) and isinstance(node.func, (ast.Name, ast.Attribute))):
            continue
        try:
            arguments = {kw.arg: ast.literal_eval(kw.value) for kw in node.keywords if kw.arg}
        except (ValueError, SyntaxError, RecursionError):
            continue
        calls.append(ToolCall(ast.unparse(node.func), arguments))
    return calls


def _functionary_v32(text: str, types: Types) -> list[ToolCall]:
    """Functionary v3.2: the generation prompt ends in `>>>`, so a reply is `NAME` then its JSON
    arguments on the next line (`>>>NAME` before each further call). With no marker of its own,
    a name counts only when it is one of the tools offered."""
    calls = []
    for match in re.finditer(r"(?:^|>>>)\s*([\w.-]+)\n(?=\{)", text):
        arguments = first_json(text[match.end():])
        if match.group(1) in types and isinstance(arguments, dict):
            calls.append(ToolCall(match.group(1), arguments))
    return calls


@dataclass(frozen=True)
class CallFormat:
    family: str
    start: str
    """The marker the calls start with, as a regular expression: the reply's text before its
    first match is the answer's."""
    read: Callable[[str, Types], list[ToolCall]]
    """The calls in the reply from `start` on."""


_GLM_CALL = r"<tool_call(?::opensource)?>\s*([^<{\n]+?)\s*(?:<tool_sep:opensource>)?\s*((?:<arg_key.*?)?)</tool_call"
_GLM_ARG = (r"<arg_key(?::opensource)?>(.*?)</arg_key(?::opensource)?>\s*"
            r"<arg_value(?::opensource)?>(.*?)</arg_value(?::opensource)?>")
_DSML = r"(?:｜DSML｜|atem:)?"
_INVOKE_START = (r'<(?:minimax:tool_call|｜DSML｜(?:function|tool)_calls|atem:function_calls)>'
                 rf'|<{_DSML}invoke name="')
_KIMI3_CALL = r'<\|open\|>call tool="([^"]+)"[^<]*<\|sep\|>(.*?)(?=<\|close\|>call|$)'
_KIMI3_ARG = r'<\|open\|>argument key="([^"]+)"[^<]*<\|sep\|>(.*?)<\|close\|>argument'

FORMATS: tuple[CallFormat, ...] = (
    # XML-style first: their markers hold the JSON families' (<tool_call>, <function=)
    CallFormat("qwen3-coder", r"<function=", _xml(r"<function=([^>\n]+)>(.*?)(?:</function>|$)",
                                                  r"<parameter=([^>\n]+)>(.*?)</parameter>")),
    CallFormat("glm", r"<tool_call", _xml(_GLM_CALL, _GLM_ARG)),
    CallFormat("invoke", _INVOKE_START, _xml(rf'<{_DSML}invoke name="([^"]+)">(.*?)</{_DSML}invoke>',
                                              rf'<{_DSML}parameter name="([^"]+)"(?: string="(true|false)")?>'
                                              rf"(.*?)</{_DSML}parameter>")),
    CallFormat("minicpm", r"<function\ name=\"", _xml(r'<function name="([^"]+)">(.*?)</function>',
                                                    r'<param name="([^"]+)">(.*?)</param>')),
    CallFormat("kimi-k3", r"<\|open\|>call\ tool=\"", _xml(_KIMI3_CALL, _KIMI3_ARG)),
    CallFormat("minimax-m3", r"(?:\]<\]minimax\[>\[)?<tool_call>\s*(?:\]<\]minimax\[>\[)?<invoke name=|<invoke name=",
               _minimax3),
    # JSON arguments after a header naming the tool
    CallFormat("kimi-k2", r"<\|tool_call_begin\|>",
               _headed(r"<\|tool_call_begin\|>\s*(?:functions\.)?([^\s<:]+)(?::\d+)?\s*<\|tool_call_argument_begin\|>")),
    CallFormat("deepseek-r1", r"<｜tool▁call▁begin｜>function<｜tool▁sep｜>",
               _headed(r"<｜tool▁call▁begin｜>function<｜tool▁sep｜>([^\n<]+)\n```(?:json)?\n")),
    CallFormat("deepseek-v3.1", r"<｜tool▁call▁begin｜>", _headed(r"<｜tool▁call▁begin｜>([^<]+?)<｜tool▁sep｜>")),
    CallFormat("mistral-v11", r"\[TOOL_CALLS\]",
               _headed(r"\[TOOL_CALLS\]\s*([\w.-]+)\s*(?:\[CALL_ID\][^\[]*)?\[ARGS\]")),
    CallFormat("harmony", r"to=", _headed(r"to=(?:functions\.)?([\w.-]+)[^<]*(?:<\|channel\|>[^<]*)?"
                                         r"(?:<\|constrain\|>[^<]*)?<\|message\|>")),
    CallFormat("solar", r"<\|tool_call:begin\|>", _headed(r"<\|tool_call:name\|>([^<]+)<\|tool_call:args\|>")),
    CallFormat("functionary-v3.1", r"<function=", _headed(r"<function=([\w.-]+)>")),
    CallFormat("functionary-v3.2", r"^\s*[\w.-]+\n\{|>>>[\w.-]+\n", _functionary_v32),
    # JSON objects (or lists of them) after a marker
    CallFormat("hermes", r"<tool_call>", _after("<tool_call>")),
    CallFormat("mistral", r"\[TOOL_CALLS\]", _after("[TOOL_CALLS]")),
    CallFormat("apriel-minimax-m1", r"<tool_calls>", _after("<tool_calls>")),
    CallFormat("nemotron-v2", r"<TOOLCALL>", _after("<TOOLCALL>")),
    CallFormat("granite", r"<\|tool_call\|>", _after("<|tool_call|>")),
    CallFormat("command-r7b", r"<\|START_ACTION\|>", _after("<|START_ACTION|>")),
    CallFormat("apertus", r"<\|tools_prefix\|>", _after("<|tools_prefix|>")),
    CallFormat("firefunction-v2", r" ?functools\[", _after("functools")),
    CallFormat("gigachat", r"<\|function_call\|>", _after("<|function_call|>")),
    CallFormat("gigachat-3", r"function\ call<\|role_sep\|>", _after("function call<|role_sep|>")),
    CallFormat("gemma4", r"<\|tool_call>", _gemma4),
    CallFormat("lfm2", r"<\|tool_call_start\|>", lambda text, types: _pythonic(text.split("<|tool_call_start|>", 1)[-1],
                                                                             types)),
)
"""Tried in this order; the first whose marker the reply holds and that reads a call wins."""


def family_calls(reply: str, types: Types) -> tuple[list[ToolCall], str] | None:
    """The calls in a reply written in one of FORMATS, and its text before them; None when no
    family's marker leads to a call."""
    for fmt in FORMATS:
        found = re.search(fmt.start, reply)
        if found is None:
            continue
        calls = fmt.read(reply[found.start():], types)
        if calls:
            return calls, reply[:found.start()].strip()
    return None
