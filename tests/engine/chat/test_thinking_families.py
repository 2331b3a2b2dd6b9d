"""The thought formats of real templates beyond `<think>` and harmony, on copies of the default
model given llama.cpp's vendored templates: Gemma 4's thought channel and Command R7B's thinking
markers are found from what the template renders, a reply in each splits into thought and
answer however it streams, thinking off writes the template's empty thought, and the history
drops or keeps the thought as the setting says. (That the prompt equals llama-server's, with
thinking on and off, is tests/remote/test_template_render.py.)"""

from __future__ import annotations

import pytest

from chatapp.config import Settings
from chatapp.engine.chat.engine import Engine
from chatapp.engine.events import Message
from chatapp.engine.local.backend import LocalBackend
from chatapp.engine.local.llama import LlamaRuntime, LoadOptions
from chatapp.engine.thinking import ThoughtSplitter
from chatapp.llama_tools import templates_dir

SYSTEM = "You are a concise assistant."
TEMPLATES = templates_dir()  # at collection, as the other template tests take it: a test's own cache is empty
FAMILIES = {
    # template: (kind, a reply as the model writes it, its thought, its answer, the empty thought off writes)
    "google-gemma-4-31B-it": ("channel", "<|channel>thought\nThey ask for a capital.\n<channel|>Paris.",
                              "They ask for a capital.\n", "Paris.", "<|channel>thought\n<channel|>"),
    "google-gemma-4-31B-it-interleaved": ("channel", "<|channel>thought\nA capital.<channel|>Paris.",
                                          "A capital.", "Paris.", "<|channel>thought\n<channel|>"),
    "CohereForAI-c4ai-command-r7b-12-2024-tool_use": (
        "command", "<|START_THINKING|>They ask for a capital.<|END_THINKING|><|START_RESPONSE|>Paris.",
        "They ask for a capital.", "Paris.", "<|START_THINKING|><|END_THINKING|>"),
}


@pytest.fixture
def engine_for(family_models):
    opened = []

    def make(stem: str, **settings) -> Engine:
        runtime = LlamaRuntime(family_models(TEMPLATES / f"{stem}.jinja"), LoadOptions(n_ctx=2048))
        opened.append(Engine(LocalBackend(runtime), Settings(n_ctx=2048, system_prompt=SYSTEM, **settings)))
        return opened[-1]
    yield make
    for engine in opened:
        engine.close()


@pytest.mark.parametrize("stem", FAMILIES)
def test_the_format_is_found_and_a_reply_splits_however_it_streams(engine_for, stem):
    kind, reply, thought, answer, empty = FAMILIES[stem]
    engine = engine_for(stem)
    fmt = engine.thinking.format
    assert fmt.kind == kind and engine.thinking.mode == "on" and engine.thinking.switchable
    for cuts in (1, 2, 5, len(reply)):
        splitter = ThoughtSplitter(fmt)
        parts = [splitter.feed(reply[i:i + cuts]) for i in range(0, len(reply), cuts)] + [splitter.finish()]
        assert ("".join(t for t, _ in parts), "".join(a for _, a in parts)) == (thought, answer), cuts
    without = ThoughtSplitter(fmt)  # an answer with no thought at all
    got = [without.feed(fmt.answer_opening + "Rome."), without.finish()]
    assert "".join(a for _, a in got) == "Rome." and not "".join(t for t, _ in got)
    on = engine.render(add_generation_prompt=True)
    assert engine.thinking.set_mode("off") == "off"
    assert engine.render(add_generation_prompt=True).endswith(empty) and not on.endswith(empty)


@pytest.mark.parametrize("history", ["template", "keep"])
@pytest.mark.parametrize("stem", ["google-gemma-4-31B-it", "CohereForAI-c4ai-command-r7b-12-2024-tool_use"])
def test_the_history_drops_or_keeps_the_thought(engine_for, stem, history):
    """Gemma 4 strips a thought channel from a reply's content, and Command R7B writes a reply's
    thought only beside a tool call: "template" leaves the thought out as they do, "keep" puts the
    reply back as it was written, markers and all, where the template wrote the reply."""
    kind, reply, thought, answer, _ = FAMILIES[stem]
    engine = engine_for(stem, thinking_history=history)
    engine.load_conversation([Message("system", SYSTEM), Message("user", "What is the capital of France?"),
                              Message("assistant", answer, thinking=thought), Message("user", "And of Italy?")])
    prompt = engine.render(add_generation_prompt=True)
    assert (thought in prompt) is (history == "keep")
    assert prompt.count(answer) == 1
    if history == "keep":
        assert engine.thinking.format.kept_content(thought, answer) in prompt
