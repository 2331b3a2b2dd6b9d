"""Chat templates render in Jinja's sandbox with a CPU-time limit, exactly as llama-cpp-python would."""

from __future__ import annotations

import threading
import time

import jinja2
import pytest
from llama_cpp.llama_chat_format import Jinja2ChatFormatter

from chatapp.engine.models import template
from chatapp.engine.models.cpu_limit import CPULimitExceeded, cpu_limit
from chatapp.engine.models.gguf_header import read_header
from chatapp.engine.models.template import ChatTemplate, check_templates, compile_hazard
from chatapp.errors import ModelError

CONVERSATION = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
                {"role": "assistant", "content": "Hello! {{ not jinja }}"}, {"role": "user", "content": "Bye"}]
# Features llama-cpp-python's formatter offers a template: tojson, {% generation %}, loop controls,
# raise_exception, bos/eos tokens, add_generation_prompt, trim_blocks/lstrip_blocks.
FEATURES = """{{ bos_token }}
{% for m in messages %}
  {% if m.role == 'system' %}{% continue %}{% endif %}
  {% if m.role == 'assistant' %}{% generation %}{{ m.content }}{% endgeneration %}{{ eos_token }}
  {% else %}{{ m | tojson }}{% endif %}
  {% if loop.index > 10 %}{% break %}{% endif %}
{% endfor %}
{% if add_generation_prompt %}<assistant>{% endif %}"""


def reference(source: str, messages, add_generation_prompt: bool) -> str:
    return Jinja2ChatFormatter(template=source, eos_token="</s>", bos_token="<s>",
                               add_generation_prompt=add_generation_prompt)(messages=messages).prompt


@pytest.fixture(scope="module")
def default_template(default_model_path) -> str:
    return read_header(default_model_path, check_data=False).metadata[template.TEMPLATE_KEY]


@pytest.mark.parametrize("add_generation_prompt", [True, False])
def test_renders_exactly_as_llama_cpp_python(default_template, add_generation_prompt):
    for source in (default_template, FEATURES):
        ours = ChatTemplate(source, bos_token="<s>", eos_token="</s>")
        for n in range(len(CONVERSATION) + 1):
            expected = reference(source, CONVERSATION[:n], add_generation_prompt)
            assert ours.render(CONVERSATION[:n], add_generation_prompt=add_generation_prompt) == expected


def test_raise_exception_is_one_line():
    source = ("{# the refusal is on line 3 #}\n{% if messages %}\n"
              "{{ raise_exception('Conversation roles must\nalternate') }}{% endif %}")
    with pytest.raises(ModelError, match=r"refused the conversation: Conversation roles must alternate "
                                         r"\(raise_exception at its line 3\)$"):
        ChatTemplate(source, bos_token="", eos_token="").render(CONVERSATION, add_generation_prompt=True)


# --- hostile templates ---------------------------------------------------------------------------
def escapes(marker) -> dict[str, str]:
    """Templates that, outside a sandbox, run a command or read a file (checked below)."""
    return {
        "popen via globals": f"{{{{ cycler.__init__.__globals__.os.popen('touch {marker}').read() }}}}",
        "subclasses": "{% for c in ''.__class__.__mro__[1].__subclasses__() %}{% if c.__name__ == 'Popen' %}"
                      f"{{{{ c(['touch', '{marker}']).wait() }}}}{{% endif %}}{{% endfor %}}",
        "open a file": "{{ lipsum.__globals__.__builtins__.open('/etc/hostname').read() }}",
        "include a file": "{% include '/etc/hostname' %}",
    }


def test_the_escapes_work_outside_the_sandbox(tmp_path):
    marker = tmp_path / "escaped"
    plain = jinja2.Environment()
    for name, source in escapes(marker).items():
        if name != "include a file":  # a plain Environment has no loader either
            plain.from_string(source).render()
    assert marker.exists()


@pytest.mark.parametrize("name", list(escapes("m")))
def test_the_sandbox_stops_each_escape_with_one_line(tmp_path, name):
    marker = tmp_path / "escaped"
    source = escapes(marker)[name]
    with pytest.raises(ModelError) as caught:
        ChatTemplate(source, bos_token="", eos_token="").render(CONVERSATION, add_generation_prompt=True)
    assert "\n" not in caught.value.one_line()
    assert not marker.exists()


def test_a_template_that_loops_for_ever_is_stopped():
    endless = "{% for a in range(100000) %}{% for b in range(100000) %}{{ '' }}{% endfor %}{% endfor %}"
    chat = ChatTemplate(endless, bos_token="", eos_token="", cpu_limit_s=0.3)
    with pytest.raises(ModelError, match=r"did not finish within 0.3 s of CPU time"):
        chat.render(CONVERSATION, add_generation_prompt=True)
    # the limit is per render: the same template object still works for the next call's budget
    with pytest.raises(ModelError, match="did not finish"):
        chat.render(CONVERSATION, add_generation_prompt=True)


def test_a_template_that_loops_in_a_worker_thread_is_stopped_there():
    endless = "{% for a in range(100000) %}{% for b in range(100000) %}{% endfor %}{% endfor %}"
    errors = []

    def worker():
        try:
            ChatTemplate(endless, bos_token="", eos_token="", cpu_limit_s=0.2).render([], add_generation_prompt=True)
        except ModelError as exc:
            errors.append(exc)

    thread = threading.Thread(target=worker)
    thread.start()
    thread.join(timeout=60)
    assert not thread.is_alive() and len(errors) == 1


@pytest.mark.parametrize("source", ["{{ 'x' * 10**12 }}", "{{ 9 ** (9 ** 9) }}", "{{ 'a' | center(1000000000) }}",
                                    "{{ ('ab' * 1000) * 1000 * 1000 }}"])
def test_constants_too_large_to_fold_are_refused_before_compiling(source):
    assert compile_hazard(source) is not None
    with pytest.raises(ModelError, match="is refused"):
        check_templates({"tokenizer.chat_template.tool_use": source})


def test_ordinary_constants_and_real_templates_pass(default_template):
    for source in (default_template, FEATURES, "{{ '-' * 80 }}{{ 2 ** 10 }}{{ 'a' ~ 'b' }}{{ [1, 2] | join(',') }}"):
        assert compile_hazard(source) is None


@pytest.mark.parametrize("source", [
    "{% set n = messages | length + 9 %}{{ n ** (n ** n) }}",
    "{% set k = messages | length + 1000 %}{{ 'ab' * (k * k * k) }}",
    "{% set ns = namespace(n=3) %}{% for i in range(40) %}{% set ns.n = ns.n * ns.n %}{% endfor %}{{ ns.n }}",
])
def test_huge_values_computed_at_render_time_are_refused(source):
    with pytest.raises(ModelError, match="unsafe: the template (computes|builds) a"):
        ChatTemplate(source, bos_token="", eos_token="").render([], add_generation_prompt=True)


def test_an_invalid_template_is_one_line():
    with pytest.raises(ModelError, match="chat template is invalid: "):
        ChatTemplate("{% for %}", bos_token="", eos_token="")


# --- the CPU limit itself ------------------------------------------------------------------------
def test_cpu_limit_leaves_nothing_pending_after_the_block():
    with pytest.raises(CPULimitExceeded):
        with cpu_limit(0.05):
            while True:
                pass
    for _ in range(3):  # a pending exception would land in one of these
        with cpu_limit(0.05):
            sum(range(1000))
        time.sleep(0.1)


def test_cpu_limit_counts_cpu_not_waiting():
    with cpu_limit(0.05):
        time.sleep(0.3)  # no CPU used: not stopped
