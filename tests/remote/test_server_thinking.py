"""Thinking models over `--server` (issue 37), on a real llama-server started with --jinja on the
default model given thinking templates (tests.gguf_copy): thinking off reaches the server's own
template as `chat_template_kwargs`, and chatapp's split of a reply into thought and answer is the
one llama-server's own parser makes (`reasoning_content`, --reasoning-format deepseek)."""

from __future__ import annotations

import httpx
import pytest

from chatapp.engine.backend import GenerationSettings
from chatapp.engine.opening import connect_engine
from tests.engine.chat.thinking_templates import QWEN3_SHAPED, R1_SHAPED
from tests.gguf_copy import copies_with_templates

from .conftest import SETTINGS, start_llama_server

QUESTION = "What is the capital of France?"


@pytest.fixture(scope="module")
def thinking_servers(default_model_path, tmp_path_factory):
    folder = tmp_path_factory.mktemp("thinking-servers")
    models = {name: folder / f"{name}.gguf" for name in ("r1", "qwen3")}
    copies_with_templates(default_model_path, {models["r1"]: R1_SHAPED, models["qwen3"]: QWEN3_SHAPED})
    servers = {name: start_llama_server(path, folder / name, "--jinja", "--reasoning-format", "deepseek",
                                        slot_files=False) for name, path in models.items()}
    yield servers
    for server in servers.values():
        server.stop()


def open_over(server):
    engine = connect_engine(SETTINGS.replace(server=server.url))
    engine.generation = GenerationSettings(temperature=0.0, max_tokens=24)
    return engine


def test_thinking_off_reaches_the_servers_template_as_its_switch(thinking_servers):
    engine = open_over(thinking_servers["qwen3"])
    try:
        on = engine.render(add_generation_prompt=True)
        assert engine.thinking.set_mode("off") == "off" and engine.thinking.switchable
        assert engine.render(add_generation_prompt=True) == on + "<think>\n\n</think>\n\n"
        record = list(engine.send(QUESTION))[-1].record
        assert record.thinking == "" and record.extra["think"] == "off" and record.reply.strip()
    finally:
        engine.close()


ECHO_PAST_THE_CLOSE = "Echo: ok</think>yes"
"""A question whose greedy reply, under R1's open thought, writes the closing marker itself and then
answers ("ok</think>no"): a thought and an answer from the model's own tokens, nothing forced."""


@pytest.mark.parametrize("question, answered", [(QUESTION, False), (ECHO_PAST_THE_CLOSE, True)],
                         ids=["all-thought", "thought-then-answer"])
def test_the_thought_is_split_as_llama_servers_own_parser_splits_it(thinking_servers, question, answered):
    """R1's generation prompt opens the thought. On the capital question the default model never
    closes it: the greedy reply is all thought by both parsers. On the echo it closes the thought
    and answers after it: both parsers cut at the same marker, and chatapp counts the thought's
    tokens apart from the answer's."""
    server = thinking_servers["r1"]
    engine = open_over(server)
    try:
        record = list(engine.send(question))[-1].record
    finally:
        engine.close()
    body = httpx.post(f"{server.url}/v1/chat/completions", timeout=120, json={
        "messages": [{"role": "system", "content": SETTINGS.system_prompt}, {"role": "user", "content": question}],
        "temperature": 0.0, "max_tokens": 24, "cache_prompt": False}).json()
    answer = body["choices"][0]["message"]
    assert answer.get("reasoning_content", "").strip() == record.thinking.strip() != ""
    assert (answer.get("content") or "").strip() == record.reply.strip()
    assert bool(record.reply.strip()) is answered
    ended = record.finish_reason == "stop"  # the end token is generated, and is neither thought nor answer
    answer_ids = httpx.post(f"{server.url}/tokenize", timeout=30, json={"content": record.reply}).json()["tokens"]
    assert record.thinking_tokens == record.generated_tokens - ended - len(answer_ids)
