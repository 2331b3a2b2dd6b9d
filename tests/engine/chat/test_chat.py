"""Engine turns on the in-process backend, against the real default model."""

import threading

import pytest

from chatapp.engine.backend import GenerationSettings
from chatapp.engine.events import ContextTrimmed, PrefillDone, PrefillProgress, TextDelta, TurnDone
from chatapp.engine.local.llama import LlamaRuntime, LoadOptions
from chatapp.errors import ContextFullError

from tests.engine.conftest import GREEDY, make_engine, run_turn, runtime_of


def test_reply_streams_and_is_recorded(greedy_chat):
    events, record = run_turn(greedy_chat, "What is the capital of France?")
    deltas = [e.text for e in events if isinstance(e, TextDelta)]
    assert isinstance(events[0], PrefillProgress) and events[0].done == events[0].total
    assert isinstance(events[1], PrefillDone)
    assert len(deltas) > 1
    assert "".join(deltas) == record.reply.rstrip("\n") or "".join(deltas) == record.reply
    assert record.reply.strip()
    assert "\ufffd" not in record.reply
    assert greedy_chat.messages[-1].role == "assistant"
    assert greedy_chat.messages[-1].content == record.reply


def test_stats_are_llama_cpp_counters(greedy_chat):
    _, record = run_turn(greedy_chat, "Count from one to five.")
    rt = runtime_of(greedy_chat)
    perf = rt.perf()
    # The record was read from llama_perf_context: prefill is the multi-token decode,
    # decode the single-token ones, and nothing else ran since.
    assert perf.prompt_tokens == record.prefill_tokens
    assert perf.eval_tokens == record.decode_tokens
    assert abs(perf.prompt_ms - record.prefill_ms) <= 0.05 * perf.prompt_ms
    assert abs(perf.eval_ms - record.decode_ms) <= 0.05 * perf.eval_ms
    assert record.decode_tokens == record.generated_tokens
    assert record.prefill_tps > 0 and record.decode_tps > 0
    assert record.kv_used == record.prompt_tokens + record.generated_tokens
    assert record.kv_used == rt.kv_cells_used() == len(rt.kv_tokens)
    assert rt.n_cached == record.kv_used
    assert record.ttft_ms >= record.prefill_ms
    assert record.kv_bytes_per_token == 30 * 3 * 64 * 2 * 2  # 30 layers, 3 KV heads of 64, K+V, f16


def test_live_decode_figures_grow_while_streaming(greedy_chat):
    events, record = run_turn(greedy_chat, "Write a sentence about the sea.")
    live = [e.live for e in events if isinstance(e, TextDelta)]
    counts = [s.decode_tokens for s in live]
    assert counts == sorted(counts) and counts[-1] <= record.decode_tokens
    assert all(s.decode_tps > 0 for s in live[1:])


def test_second_turn_reuses_the_cached_prefix(greedy_chat):
    _, first = run_turn(greedy_chat, "Name a colour.")
    _, second = run_turn(greedy_chat, "Name another one.")
    assert first.cached_tokens == 0
    assert second.cached_tokens > first.prompt_tokens // 2
    assert second.prefill_tokens < second.prompt_tokens
    assert second.prefill_tokens == second.prompt_tokens - second.cached_tokens


def test_greedy_is_repeatable(runtime):
    replies = []
    for _ in range(2):
        runtime.clear_kv()
        chat = make_engine(runtime, "Be brief.", GREEDY)
        replies.append(run_turn(chat, "Say something about llamas.")[1].reply)
    assert replies[0] == replies[1]


def test_stop_keeps_the_partial_reply_and_a_consistent_cache(default_model_path, runtime):
    chat = make_engine(runtime, "Be brief.", GenerationSettings(temperature=0.0, max_tokens=200))
    seen = []
    for event in chat.send("Tell me a long story about a dragon."):
        if isinstance(event, TextDelta):
            seen.append(event.text)
            if len(seen) == 3:
                threading.Thread(target=chat.stop).start()
        if isinstance(event, TurnDone):
            record = event.record
    assert record.finish_reason == "stopped"
    assert 3 <= record.generated_tokens < 200
    assert chat.messages[-1].stopped and chat.messages[-1].content == record.reply
    assert record.reply.startswith("".join(seen[:3]))
    assert runtime.kv_cells_used() == len(runtime.kv_tokens) == runtime.n_cached
    first_prompt, generated = record.prompt_tokens, runtime.kv_tokens[record.prompt_tokens:]
    assert runtime.kv_tokens[:first_prompt] == chat.prompt_ids(chat.messages[:2])

    _, after_stop = run_turn(chat, "Now say hi.")
    assert after_stop.cached_tokens > first_prompt
    # A fresh runtime that computes the same tokens in the same batches must agree token for
    # token: the stopped turn left exactly its prompt and its decoded tokens in the cache.
    # (Batches of other sizes give other rounding, so only the same sequence is comparable.)
    fresh_rt = LlamaRuntime(default_model_path, LoadOptions(n_ctx=1024))
    try:
        fresh = make_engine(fresh_rt, "Be brief.", chat.generation)
        fresh_rt.eval(chat.prompt_ids(chat.messages[:2])[:first_prompt])
        for token in generated:
            fresh_rt.eval([token])
        fresh.load_conversation(chat.messages[:-1])
        expected = list(fresh.regenerate())[-1].record  # answers the last user message
    finally:
        fresh_rt.close()
    assert expected.cached_tokens == after_stop.cached_tokens
    assert after_stop.reply == expected.reply


def test_stop_during_prefill_ends_the_turn_at_once_with_a_consistent_cache(runtime):
    chat = make_engine(runtime, "Be brief.", GenerationSettings(temperature=0.0, max_tokens=8))
    long_text = " ".join(f"Line {i}: the quick brown fox jumps over the lazy dog." for i in range(60))
    progress = []
    for event in chat.send(long_text):
        if isinstance(event, PrefillProgress):
            progress.append(event)
            chat.stop()  # after the first chunk: the rest of the prompt is never read
        if isinstance(event, TurnDone):
            record = event.record
    assert len(progress) == 1 and progress[0].done < progress[0].total
    assert record.finish_reason == "stopped" and record.reply == "" and record.generated_tokens == 0
    assert record.prefill_tokens == progress[0].done
    assert chat.messages[-1].role == "assistant" and chat.messages[-1].stopped
    # The chunks that ran stay cached, exactly the prompt's first tokens, and llama.cpp agrees.
    assert runtime.kv_cells_used() == runtime.n_cached == record.prefill_tokens
    assert runtime.kv_tokens == chat.prompt_ids(chat.messages[:2])[:runtime.n_cached]
    _, again = run_turn(chat, "Say hi.")
    assert again.finish_reason in ("stop", "length") and again.reply


def test_prefill_progress_arrives_in_order_and_reaches_the_total(runtime):
    chat = make_engine(runtime, "Be brief.", GenerationSettings(temperature=0.0, max_tokens=4))
    long_text = " ".join(f"Item {i} is a small red box." for i in range(70))
    events = list(chat.send(long_text))
    progress = [e for e in events if isinstance(e, PrefillProgress)]
    record = events[-1].record
    assert len(progress) >= 3
    assert [p.done for p in progress] == sorted(p.done for p in progress)
    assert all(p.total == record.prefill_tokens for p in progress)
    assert progress[-1].done == progress[-1].total
    assert all(b.elapsed_ms >= a.elapsed_ms for a, b in zip(progress, progress[1:]))
    assert progress[-1].threads >= 1
    assert events.index(progress[-1]) < next(i for i, e in enumerate(events) if isinstance(e, PrefillDone))


def test_regenerate_at_temperature_zero_gives_the_same_reply(runtime):
    chat = make_engine(runtime, "Be brief.", GenerationSettings(temperature=0.0, max_tokens=24))
    _, first = run_turn(chat, "Name a colour.")
    _, second = run_turn(chat, "Name another colour.")
    again = list(chat.regenerate())[-1].record
    # The whole prompt is reused, its rows and its end's logits that turn's own: the same reply.
    assert again.cached_tokens == again.prompt_tokens and again.prefill_tokens == 0
    assert again.reply == second.reply
    assert [m.role for m in chat.messages] == ["system", "user", "assistant", "user", "assistant"]


def test_full_context_drops_oldest_turns_but_keeps_the_system_prompt(default_model_path):
    rt = LlamaRuntime(default_model_path, LoadOptions(n_ctx=256))
    try:
        chat = make_engine(rt, "You are terse.", GenerationSettings(temperature=0.0, max_tokens=16))
        trimmed = []
        for i in range(10):
            for event in chat.send(f"Question number {i}: what is {i} plus {i}? Answer in one word."):
                if isinstance(event, ContextTrimmed):
                    trimmed.append(event)
                if isinstance(event, TurnDone):
                    assert event.record.kv_used <= 256
        assert trimmed, "ten turns cannot fit in 256 tokens"
        assert all(t.dropped_turns >= 1 and t.dropped[0].role == "user" for t in trimmed)
        assert chat.context_messages()[0].content == "You are terse."
        assert len(chat.messages) == 1 + 2 * 10  # the transcript keeps everything
        assert chat.window_start > 1
    finally:
        rt.close()


def test_a_prompt_that_cannot_fit_is_refused_and_nothing_is_lost(default_model_path):
    rt = LlamaRuntime(default_model_path, LoadOptions(n_ctx=256))
    try:
        chat = make_engine(rt, "Be brief.", GenerationSettings(temperature=0.0, max_tokens=8))
        with pytest.raises(ContextFullError, match="context holds 256"):
            list(chat.send("word " * 400))
        assert [m.role for m in chat.messages] == ["system"]
        _, record = run_turn(chat, "Hi")
        assert record.reply
    finally:
        rt.close()


def test_generation_stops_when_the_cache_is_full(default_model_path):
    rt = LlamaRuntime(default_model_path, LoadOptions(n_ctx=256))
    try:
        chat = make_engine(rt, "", GenerationSettings(temperature=0.0, max_tokens=8))
        chat.generation = GenerationSettings(temperature=0.0, max_tokens=500)
        _, record = run_turn(chat, "Write a very long essay about the history of Rome.")
        assert record.finish_reason == "context"
        assert rt.kv_cells_used() == 256
    finally:
        rt.close()


def test_one_token_decode_matches_the_bindings_eval(runtime):
    """eval() of a single token goes through the runtime's own batch; the binding's Llama.eval
    must give the same greedy continuation and leave the same cache."""
    prompt = runtime.tokenize("<|im_start|>user\nName three colours.<|im_end|>\n<|im_start|>assistant\n",
                              special=True)

    def greedy(step) -> list[int]:
        runtime.clear_kv()
        runtime.eval(prompt)
        sampler = runtime.sampler(temperature=0)
        out = []
        for _ in range(24):
            out.append(sampler.sample())
            step(out[-1])
        sampler.close()
        return out

    ours = greedy(lambda token: runtime.eval([token]))
    assert runtime.n_cached == runtime.kv_cells_used() == len(prompt) + 24
    assert runtime.kv_tokens == prompt + ours
    theirs = greedy(lambda token: runtime._llm.eval([token]))
    assert ours == theirs
