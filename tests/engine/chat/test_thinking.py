"""Thinking models on the real default model, given thinking templates (tests.gguf_copy): the
format found from what the template renders, the reply split into thought and answer as it
streams, the budget that forces the close, and "answer now"."""

from __future__ import annotations

import pytest

from chatapp.config import Settings
from chatapp.engine.backend import GenerationSettings
from chatapp.engine.chat.engine import Engine
from chatapp.engine.events import TextDelta, ThoughtDelta
from chatapp.engine.local.backend import LocalBackend
from chatapp.engine.local.llama import LlamaRuntime, LoadOptions
from chatapp.engine.thinking import ThinkingFormat, ThoughtSplitter, split_reply
from tests.engine.chat.thinking_templates import GPT_OSS_SHAPED, QWEN3_SHAPED, R1_SHAPED
from tests.gguf_copy import copies_with_templates

SYSTEM = "You are a concise assistant."


@pytest.fixture(scope="module")
def thinking_models(default_model_path, tmp_path_factory):
    folder = tmp_path_factory.mktemp("thinking")
    r1, qwen3, gpt_oss = folder / "r1-shaped.gguf", folder / "qwen3-shaped.gguf", folder / "gpt-oss-shaped.gguf"
    copies_with_templates(default_model_path, {r1: R1_SHAPED, qwen3: QWEN3_SHAPED, gpt_oss: GPT_OSS_SHAPED})
    return {"r1": r1, "qwen3": qwen3, "gpt-oss": gpt_oss, "plain": default_model_path}


def open_engine(path, max_tokens=48, **settings) -> Engine:
    runtime = LlamaRuntime(path, LoadOptions(n_ctx=1024))
    engine = Engine(LocalBackend(runtime), Settings(n_ctx=1024, system_prompt=SYSTEM, **settings))
    engine.generation = GenerationSettings(temperature=0.0, max_tokens=max_tokens)
    return engine


@pytest.fixture
def engines():
    opened = []

    def make(path, **kw):
        opened.append(open_engine(path, **kw))
        return opened[-1]
    yield make
    for engine in opened:
        engine.close()


def test_the_format_is_found_from_what_the_template_renders(thinking_models, engines):
    r1 = engines(thinking_models["r1"]).thinking.format
    assert (r1.kind, r1.prompt_opening, r1.drops_history) == ("think-tags", "<think>\n", True)
    qwen3 = engines(thinking_models["qwen3"]).thinking.format
    assert (qwen3.kind, qwen3.prompt_opening, qwen3.drops_history) == ("think-tags", "", True)
    assert not engines(thinking_models["plain"]).thinking.format.active


@pytest.mark.parametrize("opening", ["", "<think>\n"], ids=["model-opens", "prompt-opens"])
@pytest.mark.parametrize("reply, thought, answer", [
    ("<think>a<think>b</think>c</think>answer", "a<think>b", "c</think>answer"),  # nested: the first close ends it
    ("<think>never closed", "never closed", ""),
    ("<think>a</think><think>b</think>ans", "a", "<think>b</think>ans"),  # one thought a reply, as llama-server's
    ("<think></think></think>", "", "</think>"),  # a stray close after it is the answer's text
])
def test_hostile_thoughts_stream_as_they_are_kept(opening, reply, thought, answer):
    """Issue 54: a thought that never closes, nests, or is opened twice splits the same streamed
    a character at a time as the whole reply does (what was drawn is what is kept), with no
    error; the first closing marker ends the thought, as llama.cpp's reasoning parser reads it."""
    fmt = ThinkingFormat("think-tags", "<think>", "</think>", prompt_opening=opening)
    text = reply if not opening else reply.removeprefix("<think>")  # the prompt opened the thought
    splitter = ThoughtSplitter(fmt)
    pieces = [splitter.feed(ch) for ch in text] + [splitter.finish()]
    streamed = ("".join(t for t, _ in pieces), "".join(a for _, a in pieces))
    whole = split_reply(fmt, text)
    assert streamed == (whole.thinking, whole.answer) == (thought, answer)
    assert whole.closed == ("</think>" in text)


@pytest.mark.parametrize("cuts", [1, 2, 3, 7])
def test_the_splitter_finds_markers_cut_across_pieces(cuts):
    fmt = ThinkingFormat("think-tags", "<think>", "</think>")
    reply = "<think>\nsome thought < not a tag\n</think>\n\nThe answer."
    splitter = ThoughtSplitter(fmt)
    thought = answer = ""
    for i in range(0, len(reply), cuts):
        t, a = splitter.feed(reply[i:i + cuts])
        thought, answer = thought + t, answer + a
    t, a = splitter.finish()
    assert (thought + t, answer + a) == ("\nsome thought < not a tag\n", "The answer.")
    assert split_reply(fmt, "no thought at all").answer == "no thought at all"
    opened = ThinkingFormat("think-tags", "<think>", "</think>", prompt_opening="<think>\n")
    assert split_reply(opened, "never closed").thinking == "never closed"


def test_an_r1_reply_streams_its_thought_then_its_answer_and_the_budget_closes_it(thinking_models, engines):
    engine = engines(thinking_models["r1"], think_budget=6)
    events = list(engine.send("What is the capital of France?"))
    record = events[-1].record
    kinds = [type(e) for e in events if isinstance(e, (ThoughtDelta, TextDelta))]
    assert kinds[0] is ThoughtDelta and TextDelta in kinds
    assert kinds.index(TextDelta) > max(i for i, k in enumerate(kinds) if k is ThoughtDelta)
    thought = "".join(e.text for e in events if isinstance(e, ThoughtDelta))
    answer = "".join(e.text for e in events if isinstance(e, TextDelta))
    assert thought == record.thinking and answer == record.reply and answer.strip()
    assert "</think>" not in answer and "</think>" not in thought
    assert record.extra["thinking_closed_by"] == "budget"
    assert record.extra["thought_tokens_sampled"] == 6  # the budget, never more
    # the close forced after them is counted in the thought's tokens: no more than its own tokens
    assert 6 < record.thinking_tokens <= 6 + record.extra["thinking_forced_tokens"]
    assert 0 < record.thinking_ms < record.decode_ms
    reply = engine.messages[-1]
    assert (reply.thinking, reply.content) == (record.thinking, record.reply)
    # the cache holds what was generated: the thought, the forced close, then the answer
    text = "".join(t.piece for t in engine.describe(engine.last_reply_ids()))
    assert text.startswith(record.thinking) and "</think>" in text and text.endswith(record.reply)


def test_a_qwen3_reply_opened_with_its_marker_is_split_too(thinking_models, engines):
    engine = engines(thinking_models["qwen3"], think_budget=5)
    list(engine.send("What is the capital of France?"))
    assert engine.messages[-1].thinking == ""  # this model never opens a thought by itself
    opening = engine.thinking.marker_ids("<think>\n")
    record = list(engine.regenerate(forced=opening))[-1].record
    assert record.thinking.strip() and record.reply.strip() and "<think>" not in record.reply
    assert record.extra["thinking_closed_by"] == "budget"
    assert record.extra["thought_tokens_sampled"] == 5


def test_answer_now_forces_the_close_at_the_next_token(thinking_models, engines):
    engine = engines(thinking_models["r1"], max_tokens=64)
    events, pressed_at = [], None
    for event in engine.send("Tell me about the sea."):
        events.append(event)
        if isinstance(event, ThoughtDelta) and pressed_at is None and event.live.decode_tokens >= 3:
            assert engine.answer_now()
            pressed_at = event.live.decode_tokens
    record = events[-1].record
    assert pressed_at is not None
    assert record.extra["thinking_closed_by"] == "answer now"
    assert record.extra["thought_tokens_sampled"] <= pressed_at + 1  # at most one more thought token
    assert record.reply.strip() and record.thinking.strip()
    assert not engine.answer_now()  # nothing running to stop


def test_thinking_off_uses_the_template_switch_where_it_has_one(thinking_models, engines):
    """Off on a Qwen3-shaped template: its own `enable_thinking` switch closes an empty thought in
    the generation prompt, so no thought token is decoded; on again, the prompt is as before."""
    engine = engines(thinking_models["qwen3"])
    on_prompt = engine.render(add_generation_prompt=True)
    assert engine.thinking.set_mode("off") == "off" and engine.thinking.switchable
    assert engine.render(add_generation_prompt=True) == on_prompt + "<think>\n\n</think>\n\n"
    record = list(engine.send("What is the capital of France?"))[-1].record
    assert record.thinking == "" and record.extra["thought_tokens_sampled"] == 0
    assert record.extra["think"] == "off" and "thinking_closed_by" not in record.extra
    assert record.reply.strip()
    assert engine.thinking.set_mode("on") == "on"
    assert not engine.render(add_generation_prompt=True).endswith("</think>\n\n")


def test_thinking_off_without_a_switch_forces_the_close_before_the_first_thought_token(thinking_models, engines):
    engine = engines(thinking_models["r1"])
    engine.thinking.set_mode("off")
    assert not engine.thinking.switchable  # R1's template has no switch
    record = list(engine.send("What is the capital of France?"))[-1].record
    assert record.extra["thought_tokens_sampled"] == 0 and record.extra["thinking_closed_by"] == "budget"
    assert record.thinking.strip() == "" and record.reply.strip()
    assert record.extra["think"] == "off"


@pytest.mark.parametrize("text, mode, budget", [("on", "on", None), ("OFF", "off", 0), (" 512 ", "512", 512),
                                                ("64 tokens", "64", 64), ("-1", "on", None)])
def test_the_thinking_mode_is_on_off_or_a_budget(thinking_models, engines, text, mode, budget):
    engine = engines(thinking_models["plain"])
    assert engine.thinking.set_mode(text) == mode and engine.thinking.budget == budget


@pytest.mark.parametrize("text", ["maybe", "-5", "99999999"])
def test_a_bad_thinking_mode_is_one_line_and_changes_nothing(thinking_models, engines, text):
    from chatapp.errors import ChatappError

    engine = engines(thinking_models["plain"])
    engine.thinking.set_mode("256")
    with pytest.raises(ChatappError) as failed:
        engine.thinking.set_mode(text)
    assert "\n" not in failed.value.one_line() and engine.thinking.mode == "256"


HARMONY_REPLY = ("<|channel|>analysis<|message|>They ask for a capital.<|end|>"
                 "<|start|>assistant<|channel|>final<|message|>Paris.")


def test_gpt_oss_harmony_is_found_and_split_by_its_channels(thinking_models, engines):
    fmt = engines(thinking_models["gpt-oss"]).thinking.format
    assert (fmt.kind, fmt.prompt_opening, fmt.drops_history) == ("harmony", "", True)
    for cuts in (1, 3, 11, len(HARMONY_REPLY)):
        splitter = ThoughtSplitter(fmt)
        parts = [splitter.feed(HARMONY_REPLY[i:i + cuts]) for i in range(0, len(HARMONY_REPLY), cuts)]
        parts.append(splitter.finish())
        assert ("".join(t for t, _ in parts), "".join(a for _, a in parts)) == ("They ask for a capital.", "Paris.")
    skipped = split_reply(fmt, "<|channel|>final<|message|>Paris.")  # no analysis channel at all
    assert (skipped.thinking, skipped.answer, skipped.closed) == ("", "Paris.", True)


@pytest.mark.parametrize("history", ["template", "keep"])
def test_gpt_oss_history_drops_or_keeps_the_analysis_channel(thinking_models, engines, history):
    """Its template refuses channel tags in a reply's content, so "keep" puts the reply as decoded
    where the template wrote the final channel's header; "template" drops the thought."""
    from chatapp.engine.events import Message

    engine = engines(thinking_models["gpt-oss"], thinking_history=history)
    engine.load_conversation([Message("system", SYSTEM), Message("user", "What is the capital of France?"),
                              Message("assistant", "Paris.", thinking="They ask for a capital."),
                              Message("user", "And of Italy?")])
    prompt = engine.render(add_generation_prompt=True)
    if history == "keep":
        assert f"<|start|>assistant{HARMONY_REPLY}<|end|><|start|>user" in prompt
    else:
        assert "They ask for a capital." not in prompt
        assert "<|start|>assistant<|channel|>final<|message|>Paris.<|end|><|start|>user" in prompt
    assert prompt.endswith("<|start|>user<|message|>And of Italy?<|end|><|start|>assistant")


def test_a_budget_message_is_forced_into_the_thought_before_its_close(thinking_models, engines):
    """As llama-server's --reasoning-budget-message: the budget runs out, the message and the
    close are forced, and the model answers after them."""
    message = "Time is up, I must answer now."
    engine = engines(thinking_models["r1"], think_budget=4, think_budget_message=message)
    record = list(engine.send("What is the capital of France?"))[-1].record
    assert record.extra["thinking_closed_by"] == "budget" and record.extra["thought_tokens_sampled"] == 4
    assert record.thinking.rstrip().endswith(message) and record.reply.strip()
    assert not record.reply.lstrip().startswith(message)  # forced into the thought, not the answer


def test_a_budget_message_that_is_not_one_short_line_is_refused():
    from chatapp.config import validate
    from chatapp.errors import ConfigError

    for bad in ("two\nlines", "x" * 1001):
        with pytest.raises(ConfigError, match="think_budget_message must be one line"):
            validate(Settings(think_budget_message=bad))
