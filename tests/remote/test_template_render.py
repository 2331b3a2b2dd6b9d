"""Every chat template llama.cpp ships is rendered as llama-server renders it (issue 53): for the
same conversation, chatapp's in-process prompt (the Engine's, with its thinking switch) equals
the real llama-server's /apply-template on a copy of the default model carrying the template
(tests/conftest.py family_models, shared with the family tests), with thinking as llama-server
has it by default and with thinking off (`chat_template_kwargs` enable_thinking false, chatapp's
thinking mode "off"). Where chatapp differs, DIFFERS says why (docs/models.md, "Rendered as
llama-server renders it"), and the test holds that it still differs, so the list stays true."""

from __future__ import annotations

import httpx
import pytest

from chatapp.config import Settings
from chatapp.engine.chat.engine import Engine
from chatapp.engine.events import Message
from chatapp.engine.local.backend import LocalBackend
from chatapp.engine.local.llama import LlamaRuntime, LoadOptions
from chatapp.llama_tools import templates_dir

TEMPLATES = sorted(templates_dir().glob("*.jinja"))
CONVERSATION = (("system", "You are a concise assistant."), ("user", "What is the capital of France?"),
                ("assistant", "Paris."), ("user", "And of Italy?"))
DATE = "llama-server writes today's date where chatapp keeps the template's own (a saved cache stays valid)"
JINJA = "llama.cpp's own Jinja engine evaluates the template differently from Jinja2, the reference chatapp uses"
DIFFERS = {
    "on": {"meta-llama-Llama-3.1-8B-Instruct": DATE, "meta-llama-Llama-3.3-70B-Instruct": DATE,
           "deepseek-ai-DeepSeek-V4": JINJA, "deepseek-ai-DeepSeek-V4-Flash-0731": JINJA},
    "off": {"meta-llama-Llama-3.1-8B-Instruct": DATE, "meta-llama-Llama-3.3-70B-Instruct": DATE,
            "poolside-Laguna-S-2.1": JINJA},
}
"""Per thinking setting, each template whose prompt differs from llama-server's, and why."""


def chatapp_prompts(model) -> dict[str, str]:
    runtime = LlamaRuntime(model, LoadOptions(n_ctx=2048, n_threads=1, n_threads_batch=1))
    try:
        engine = Engine(LocalBackend(runtime), Settings(n_ctx=2048, system_prompt=CONVERSATION[0][1]))
        messages = [Message(role, text) for role, text in CONVERSATION]
        prompts = {"on": engine.render(messages)}
        engine.thinking.set_mode("off")
        prompts["off"] = engine.render(messages)
        return prompts
    finally:
        runtime.close()


@pytest.mark.parametrize("template", TEMPLATES, ids=lambda path: path.stem)
def test_the_prompt_is_the_one_llama_server_renders(template, family_models, another_server):
    model = family_models(template)
    ours = chatapp_prompts(model)
    server = another_server("--jinja", model=model, n_ctx=2048, slot_files=False)
    body = {"messages": [{"role": role, "content": text} for role, text in CONVERSATION]}
    theirs = {"on": httpx.post(f"{server.url}/apply-template", json=body, timeout=60).json()["prompt"],
              "off": httpx.post(f"{server.url}/apply-template", timeout=60,
                                json={**body, "chat_template_kwargs": {"enable_thinking": False}}).json()["prompt"]}
    for thinking in ("on", "off"):
        if template.stem in DIFFERS[thinking]:
            assert ours[thinking] != theirs[thinking], f"listed as differing ({DIFFERS[thinking][template.stem]})"
        else:
            assert ours[thinking] == theirs[thinking], thinking


def test_every_listed_difference_names_a_vendored_template():
    names = {path.stem for path in TEMPLATES}
    assert len(names) >= 70 and all(set(listed) <= names for listed in DIFFERS.values())
