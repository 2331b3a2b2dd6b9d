"""Tools in the prompt: a template that reads `tools` renders them, one that does not gets them
in the system message; each tool's cost is exactly what it adds to the prompt's tokens."""

from chatapp.engine.chat.tool_prompt import ToolPrompt
from chatapp.engine.events import Message
from chatapp.engine.models.template import ChatTemplate
from chatapp.engine.tools.builtin import CURRENT_TIME, LIST_FOLDER, READ_FILE
from chatapp.engine.tools.spec import ToolSpec
from tests.engine.conftest import make_engine

HERMES = """{%- if tools %}<|im_start|>system
{{ messages[0]['content'] if messages[0]['role'] == 'system' else 'You are helpful.' }}

# Tools
<tools>
{%- for tool in tools %}
{{ tool | tojson }}
{%- endfor %}
</tools><|im_end|>
{% endif %}
{%- for m in messages %}{% if not (tools and m['role'] == 'system') %}<|im_start|>{{ m['role'] }}
{{ m['content'] }}<|im_end|>
{% endif %}{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant
{% endif %}"""

ADD = ToolSpec("add", "Add two integers.", {"type": "object", "properties": {"a": {"type": "integer"},
                                                                          "b": {"type": "integer"}}}, "test")


def template_render(source: str):
    template = ChatTemplate(source, bos_token="", eos_token="<|im_end|>")

    def render(messages, *, add_generation_prompt, tools=None, switches=None):
        return template.render([m.as_template_input() for m in messages], add_generation_prompt=add_generation_prompt,
                               tools=list(tools) if tools else None, switches=switches)
    return render


def test_a_template_that_reads_tools_renders_them():
    prompt = ToolPrompt(template_render(HERMES))
    assert prompt.native and prompt.format == "template"
    text = prompt.render([Message("system", "Be brief."), Message("user", "2+2?")], add_generation_prompt=True,
                         tools=[ADD])
    assert '<tools>{"type": "function", "function": {"name": "add"' in text
    assert text.startswith("<|im_start|>system\nBe brief.\n\n# Tools")


def test_a_template_without_tools_gets_them_in_the_system_message():
    plain = "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    prompt = ToolPrompt(template_render(plain))
    assert not prompt.native
    text = prompt.render([Message("user", "2+2?")], add_generation_prompt=False, tools=[ADD])
    assert text.startswith("<|im_start|>system\nYou can call these tools")
    assert '{"name": "add", "description": "Add two integers."' in text
    assert '{"tool_call": {"name": "<tool name>"' in text
    text = prompt.render([Message("system", "Be brief."), Message("user", "hi")], add_generation_prompt=False,
                         tools=[ADD])
    assert text.startswith("<|im_start|>system\nBe brief.\n\nYou can call these tools")


def test_each_tools_cost_is_what_it_adds_to_the_real_models_prompt(runtime):
    engine = make_engine(runtime, "You are a concise assistant.")
    tools = [CURRENT_TIME, READ_FILE, LIST_FOLDER, ADD]
    costs = engine.tool_costs(tools)
    assert costs.format == "generic"  # SmolLM2's template has no tools of its own

    def prompt_tokens(offered):
        engine.set_tools(offered)
        return len(engine.prompt_ids(engine.messages, add_generation_prompt=False))

    everything = prompt_tokens(tools)
    for tool in tools:
        assert costs.per_tool[tool.name] == everything - prompt_tokens([t for t in tools if t is not tool]) > 10
    assert costs.total == everything - prompt_tokens([])
    assert costs.glue == costs.total - sum(costs.per_tool.values()) > 0
    engine.set_tools(tools)
    assert engine.tool_costs() == costs
