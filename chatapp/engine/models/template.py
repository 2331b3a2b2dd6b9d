"""A model's chat template, rendered in Jinja's sandbox with a limit on CPU time.

The template (the GGUF's tokenizer.chat_template) is Jinja code that came with a model file
from anywhere. `ChatTemplate` renders it the way llama-cpp-python's Jinja2ChatFormatter does
(same sandbox, options, extensions and globals, so prompts are identical; the tests compare
the two), and adds what that formatter lacks:

- a limit on the CPU time of each render (chatapp.engine.models.cpu_limit): a template that loops for
  ever is stopped inside the render, in the thread that runs it, after RENDER_CPU_LIMIT_S, and
  the caller gets a one-line ModelError. Overhead on the default model's template (SmolLM2)
  with a 10-message conversation: 21.4 us a render bare, 24.5 us with the limit (+3 us, +14 %;
  a `sys.settrace` guard cost +66 to +122 us), measured once with benchmarks/template_render.py
  on the shared 2-core machine; renders happen a few times per turn, plus once per message for
  the Tokens panel's prefixes.
- limits on `*` and `**`, the operators that make one C call take unbounded time or memory
  (`'x' * 10**12`, `9 ** 9 ** 9`), which no time limit can interrupt. A string grown by
  repeated `+` or `~` in a loop is bounded by the time limit alone (each step is one copy).
- `compile_hazard()`: llama-cpp-python compiles every chat template in the file when it loads
  the model, and Jinja computes constant expressions while compiling, in C: a template holding
  `{{ 9 ** (9 ** 9) }}` hangs the load itself. It is checked before loading.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime
from typing import Any

import jinja2
import jinja2.ext
from jinja2 import nodes
from jinja2.exceptions import SecurityError, TemplateError
from jinja2.sandbox import ImmutableSandboxedEnvironment

from chatapp.engine.models.cpu_limit import CPULimitExceeded, cpu_limit
from chatapp.errors import ModelError

RENDER_CPU_LIMIT_S = 1.0
"""A render takes well under a millisecond; a second of CPU means the template never ends."""
MAX_TEXT = 1 << 25
"""The longest string or list `*` may build (32 Mi items), far past any context window."""
MAX_INT_BITS = 1 << 16
"""The largest integer `*` and `**` may build; chat templates count messages, not atoms."""
MAX_CONSTANT = 1 << 20
"""What a constant expression folded at compile time may amount to (see compile_hazard)."""
TEMPLATE_KEY = "tokenizer.chat_template"


class _GenerationTag(jinja2.ext.Extension):
    """Pass-through for Hugging Face's `{% generation %}` tag, as llama-cpp-python does."""

    tags = {"generation"}

    def parse(self, parser):
        parser.stream.skip(1)
        return parser.parse_statements(("name:endgeneration",), drop_needle=True)


def _too_big(value: Any, times: int) -> bool:
    return isinstance(value, (str, list, tuple)) and len(value) * max(times, 0) > MAX_TEXT


class _Sandbox(ImmutableSandboxedEnvironment):
    intercepted_binops = frozenset({"*", "**"})

    def call_binop(self, context, operator: str, left: Any, right: Any) -> Any:
        ints = isinstance(left, int) and isinstance(right, int)
        if operator == "**" and ints and abs(left) > 1 and right > 0 \
                and right * abs(left).bit_length() > MAX_INT_BITS:
            raise SecurityError("the template computes a power too large")
        if operator == "*" and (ints and left.bit_length() + right.bit_length() > MAX_INT_BITS
                                or isinstance(right, int) and _too_big(left, right)
                                or isinstance(left, int) and _too_big(right, left)):
            raise SecurityError("the template builds a value too large")
        return super().call_binop(context, operator, left, right)


def _tojson(x: Any, ensure_ascii: bool = False, indent: int | None = None,
            separators: tuple[str, str] | None = None, sort_keys: bool = False) -> str:
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


class _Refused(TemplateError):
    """raise_exception() called by the template itself."""


def _raise_exception(message: str):
    raise _Refused(message)


def _template_line(exc: BaseException) -> int | None:
    """The template line that raised: Jinja rewrites a render's traceback so that its frames
    from the template carry the template's file name and line numbers."""
    line, tb = None, exc.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == "<template>":
            line = tb.tb_lineno
        tb = tb.tb_next
    return line


def merge_system(messages: list[dict]) -> list[dict] | None:
    """llama.cpp's `system_message_not_supported` workaround (common/chat.cpp): the system
    prompt joins the next message's text after a newline (dropped when alone); None without one."""
    if not messages or messages[0].get("role") != "system":
        return None
    if len(messages) == 1:
        return []
    first, second = messages[0], messages[1]
    return [{**second, "content": f"{first.get('content') or ''}\n{second.get('content') or ''}"}, *messages[2:]]


THINKING_ON = {"enable_thinking": True}
"""The template switch as llama-server sets it by default (its chat_template_kwargs override it)."""


def llama_server_context() -> dict[str, str]:
    """The variables llama-server gives every template (common_chat_extra_context)."""
    now = datetime.now()
    return {"datetime": now.strftime("%b %d %Y"), "date_string": now.strftime("%d %b %Y")}


def _environment() -> _Sandbox:
    env = _Sandbox(loader=jinja2.BaseLoader(), trim_blocks=True, lstrip_blocks=True,
                   extensions=[_GenerationTag, jinja2.ext.loopcontrols])
    env.filters["tojson"] = _tojson
    return env


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:300] or type(exc).__name__


class ChatTemplate:
    """One model's chat template, compiled once, rendered any number of times from any thread."""

    def __init__(self, source: str, *, bos_token: str, eos_token: str,
                 cpu_limit_s: float = RENDER_CPU_LIMIT_S):
        self.bos_token = bos_token
        self.eos_token = eos_token
        self._functions_text = " functools[" in source
        """FireFunction v2 reads the tools as JSON text in `functions`, which llama.cpp gives it
        (found by the same mark in its source)."""
        self.cpu_limit_s = cpu_limit_s
        if hazard := compile_hazard(source):
            raise ModelError(f"the model's chat template is refused: {hazard}")
        try:
            with cpu_limit(cpu_limit_s):
                self._template = _environment().from_string(source)
        except CPULimitExceeded:
            raise ModelError(f"the model's chat template did not compile within {cpu_limit_s:g} s") from None
        except Exception as exc:  # noqa: BLE001 - jinja's errors come in many types
            raise ModelError(f"the model's chat template is invalid: {_one_line(exc)}") from None

    def render(self, messages: list[dict[str, str]], *, add_generation_prompt: bool,
               tools: list[dict] | None = None, switches: Mapping[str, bool] | None = None) -> str:
        """The prompt text (`tools`: OpenAI-style function entries, for a template that reads
        them); raises ModelError (one line) when the template fails, reaches for
        something the sandbox forbids, or runs out of time."""
        context = dict(messages=messages, bos_token=self.bos_token, eos_token=self.eos_token,
                       add_generation_prompt=add_generation_prompt, raise_exception=_raise_exception,
                       strftime_now=_strftime_now, function_call=None, tools=tools or None,
                       functions=json.dumps(tools, indent=2) if tools and self._functions_text else None,
                       tool_choice=None)
        # llama-server gives every template `enable_thinking` (true unless reasoning is off), and
        # templates test it as `not enable_thinking`: left undefined, QwQ, DeepSeek V3.1, MiniCPM5
        # and others rendered their thought closed while thinking was on.
        context.update(THINKING_ON, **{name: bool(on) for name, on in (switches or {}).items() if name not in context})
        if tools and self._functions_text:  # FireFunction's tools block reads today's date too
            context.update(llama_server_context())
        try:
            with cpu_limit(self.cpu_limit_s):
                try:
                    return self._template.render(**context)
                except _Refused:
                    merged = merge_system(messages)  # llama.cpp's workaround for a template with no system role
                    if merged is None:
                        raise
                    return self._template.render(**{**context, "messages": merged})
                except (TypeError, jinja2.UndefinedError):
                    if tools:
                        raise
                    # as llama-server renders it: no `tools` at all when none are offered (a *-tool_use
                    # template iterates it), its date variables (firefunction's `datetime`), and
                    # firefunction's `functions` as the empty text llama.cpp's Jinja makes of a
                    # missing variable added to text
                    kept = {k: v for k, v in context.items() if k not in ("tools", "functions")}
                    return self._template.render(**kept, functions="", **llama_server_context())
        except CPULimitExceeded:
            raise ModelError(f"the model's chat template did not finish within {self.cpu_limit_s:g} s "
                             "of CPU time; stopped") from None
        except jinja2.TemplateNotFound as exc:
            raise ModelError(f"the model's chat template tried to load another template ({_one_line(exc)}); "
                             "it cannot") from None
        except _Refused as exc:
            where = _template_line(exc)
            raise ModelError(f"the model's chat template refused the conversation: {_one_line(exc)}"
                             + (f" (raise_exception at its line {where})" if where else "")) from None
        except SecurityError as exc:
            raise ModelError(f"the model's chat template tried something unsafe: {_one_line(exc)}") from None
        except RecursionError:
            raise ModelError("the model's chat template recursed too deeply") from None
        except Exception as exc:  # noqa: BLE001 - jinja errors, and whatever a filter raises
            raise ModelError(f"the model's chat template failed: {_one_line(exc)}") from None


# --- what Jinja would compute while compiling ---------------------------------------------------
_FOLDED = (nodes.BinExpr, nodes.UnaryExpr, nodes.Concat, nodes.Filter, nodes.Test, nodes.Compare,
           nodes.CondExpr, nodes.Getitem, nodes.Slice)
_LEAVES = (nodes.Const, nodes.TemplateData)
_GROUPS = (nodes.List, nodes.Tuple, nodes.Dict, nodes.Pair, nodes.Keyword, nodes.Operand)


def _amount(node: nodes.Node, memo: dict[int, int | None]) -> int | None:
    """An upper bound on the size of the constant `node` folds to (string length, list length
    or integer magnitude), or None when it is not constant. Products bound what `*`, `%` and
    filters such as center(n) can make; a power with an exponent over 64 counts as unbounded."""
    if id(node) not in memo:
        memo[id(node)] = _fold_amount(node, memo)
    return memo[id(node)]


def _fold_amount(node: nodes.Node, memo: dict[int, int | None]) -> int | None:
    if isinstance(node, _LEAVES):
        value = node.data if isinstance(node, nodes.TemplateData) else node.value
        if isinstance(value, bool) or value is None or isinstance(value, float):
            return 1
        if isinstance(value, int):
            return max(abs(value), 1)
        return max(len(value), 1) if isinstance(value, (str, bytes, tuple)) else 1
    if not isinstance(node, _FOLDED + _GROUPS):
        return None
    parts = [_amount(child, memo) for child in node.iter_child_nodes()]
    if any(part is None for part in parts):
        return None
    if isinstance(node, nodes.Pow):
        base, exponent = parts
        return MAX_CONSTANT + 1 if exponent > 64 and base > 1 else base ** exponent
    if isinstance(node, (nodes.Mul, nodes.Mod, nodes.Filter, nodes.Test)):
        product = 1
        for part in parts:
            product = min(product * part, MAX_CONSTANT + 1)
        return product
    return sum(parts)


def compile_hazard(source: str) -> str | None:
    """Why compiling `source` could hang or exhaust memory, or None.

    Jinja folds an expression made only of constants while compiling, with plain Python
    operators (llama-cpp-python's environment intercepts none), so `{{ 'x' * 10**10 }}` or a
    filter such as center(10**9) on a constant runs in C before anything can time it. Chat
    templates fold only small things ('-' * 80); anything amounting to over a million is refused."""
    try:
        tree = _environment().parse(source)
    except TemplateError:
        return None  # the compile reports it, quickly
    memo: dict[int, int | None] = {}
    for node in tree.find_all(_FOLDED):
        amount = _amount(node, memo)
        if amount is not None and amount > MAX_CONSTANT:
            return f"a constant expression at line {node.lineno} is too large to compute while compiling"
    return None


def check_templates(metadata: dict[str, Any]) -> None:
    """Raise ModelError when any chat template in a GGUF's metadata (llama-cpp-python compiles
    them all on load) would hang or flood the compile."""
    for key, value in metadata.items():
        if (key == TEMPLATE_KEY or key.startswith(TEMPLATE_KEY + ".")) and isinstance(value, str):
            if hazard := compile_hazard(value):
                raise ModelError(f"the model's chat template ({key}) is refused: {hazard}")
