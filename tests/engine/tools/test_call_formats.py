"""Every chat template llama.cpp ships writes a tool call in its family's own format when it
renders an assistant message's `tool_calls` (as llama-server renders them); what a model of that
family writes is that text. Issue 53: chatapp reads each one back to the same call, its
arguments typed by the tool's schema where the format writes them as text (Qwen3.5's
`<parameter=...>`, GLM's `<arg_value>`, DeepSeek's DSML).

The templates are taken at test time from the llama-cpp-python sdist (chatapp.llama_tools);
rendering needs no model, so every template is checked in a second."""

from __future__ import annotations

import json

import pytest

from chatapp.engine.models.template import ChatTemplate
from chatapp.engine.tools.call_formats import FORMATS
from chatapp.engine.tools.calls import parse_calls
from chatapp.engine.tools.spec import ToolCall, ToolSpec
from chatapp.errors import ModelError
from chatapp.llama_tools import templates_dir

TEMPLATES = sorted(templates_dir().glob("*.jinja"))
WEATHER = ToolSpec("get_weather", "The weather in a city", {
    "type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}, "required": ["city"]})
ARGUMENTS = {"city": "São Paulo", "days": 2}
CALL_ID = "call0abcd"  # Mistral's templates refuse an id that is not 9 letters or digits
BASE = [{"role": "system", "content": "You are helpful."}, {"role": "user", "content": "The weather in São Paulo?"}]

NO_CALLS_RENDERED = {
    # templates that render an assistant message's tool_calls as nothing: their models were not
    # trained on tools (or the template leaves calls out); chatapp offers them its generic format
    "HuggingFaceTB-SmolLM3-3B", "LFM2-8B-A1B", "LFM2.5-Instruct", "deepseek-ai-DeepSeek-R1-Distill-Llama-8B",
    "google-gemma-2-2b-it", "ibm-granite-granite-3.3-2B-Instruct", "llama-cpp-rwkv-world",
    "microsoft-Phi-3.5-mini-instruct",
}
CANNOT_RENDER_A_CALL = {
    # templates whose tool-call branch fails in chatapp's sandbox: said in one line (ModelError)
    "CohereForAI-c4ai-command-r-plus-tool_use": "has no attribute 'description'",  # wants another tools shape
    "Kimi-K2-Instruct": "access to attribute 'append'",  # mutates a list: the sandbox is immutable
    "Kimi-K2-Thinking": "access to attribute 'append'",
    "llama-cpp-deepseek-r1": "not JSON serializable",
}


def rendered_call(template: ChatTemplate) -> str:
    """What the template writes after the generation prompt for one call: the text a model of
    its family generates. Arguments as an object first, as llama.cpp passes them, else as a
    JSON string (Functionary's and FireFunction's templates concatenate them)."""
    tools = [{"type": "function", "function": {"name": WEATHER.name, "description": WEATHER.description,
                                               "parameters": WEATHER.parameters}}]
    prompt = template.render(BASE, add_generation_prompt=True, tools=tools)
    for arguments in (ARGUMENTS, json.dumps(ARGUMENTS, ensure_ascii=False)):
        call = {"id": CALL_ID, "type": "function", "function": {"name": WEATHER.name, "arguments": arguments}}
        try:
            whole = template.render([*BASE, {"role": "assistant", "content": "", "tool_calls": [call]}],
                                    add_generation_prompt=False, tools=tools)
            break
        except ModelError:
            if arguments is not ARGUMENTS:
                raise
    cut = next((i for i, (a, b) in enumerate(zip(prompt, whole)) if a != b), min(len(prompt), len(whole)))
    while cut > 0 and whole[cut - 1] not in ">]\n":  # where the two part, back to the marker's start
        cut -= 1
    return whole[cut:]


@pytest.mark.parametrize("path", TEMPLATES, ids=[p.stem for p in TEMPLATES])
def test_every_templates_own_call_is_read_back(path):
    template = ChatTemplate(path.read_text(encoding="utf-8"), bos_token="<s>", eos_token="</s>")
    if path.stem in CANNOT_RENDER_A_CALL:
        with pytest.raises(ModelError, match=CANNOT_RENDER_A_CALL[path.stem]):
            rendered_call(template)
        return
    written = rendered_call(template)
    calls, _text = parse_calls(written, [WEATHER])
    if path.stem in NO_CALLS_RENDERED:
        assert WEATHER.name not in written and calls == [], written
        return
    assert [(c.name, c.arguments) for c in calls] == [(WEATHER.name, ARGUMENTS)], written


def test_the_table_has_a_family_a_marker_and_no_family_twice():
    families = [f.family for f in FORMATS]
    assert len(families) == len(set(families)) and all(f.start for f in FORMATS)


@pytest.mark.parametrize("reply, calls", [
    # two calls in one reply, in the formats that write several
    ('<tool_call>\n<function=get_weather>\n<parameter=city>\nOslo\n</parameter>\n</function>\n</tool_call>\n'
     '<tool_call>\n<function=now>\n</function>\n</tool_call>', [ToolCall("get_weather", {"city": "Oslo"}),
                                                               ToolCall("now", {})]),
    ('<tool_call>get_weather\n<arg_key>days</arg_key>\n<arg_value>3</arg_value>\n</tool_call>',
     [ToolCall("get_weather", {"days": 3})]),
    ('<|tool_calls_section_begin|><|tool_call_begin|>functions.now:0<|tool_call_argument_begin|>{}<|tool_call_end|>'
     '<|tool_call_begin|>functions.get_weather:1<|tool_call_argument_begin|>{"city": "Rome"}<|tool_call_end|>'
     '<|tool_calls_section_end|>', [ToolCall("now", {}), ToolCall("get_weather", {"city": "Rome"})]),
    ("<|tool_call_start|>[get_weather(city='Lima', days=1), now()]<|tool_call_end|>",
     [ToolCall("get_weather", {"city": "Lima", "days": 1}), ToolCall("now", {})]),
    ('<|tool_call>call:get_weather{city:<|"|>a, b: c<|"|>,days:2}<tool_call|>',
     [ToolCall("get_weather", {"city": "a, b: c", "days": 2})]),  # a string holding ", b:" stays one string
])
def test_several_calls_and_awkward_values(reply, calls):
    assert parse_calls(reply, [WEATHER])[0] == calls


@pytest.mark.parametrize("reply", [
    "<tool_call>get_weather\n<arg_key>city</arg_key>",  # cut off before its value
    "<function=get_weather>not a parameter</function>",
    "<|tool_call_start|>[get_weather(city=open('x'))]<|tool_call_end|>",  # only literals are values
    '<|tool_call>call:get_weather{city:<|"|>never closed',
    "I went to=the shop and <|message|> back",
])
def test_broken_or_hostile_calls_are_plain_replies(reply):
    assert parse_calls(reply, [WEATHER]) == ([], reply)
