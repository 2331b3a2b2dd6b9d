"""The llama-server backend under the engine, against a real llama-server on the default model,
compared with the in-process backend wherever both can say the same thing."""

from __future__ import annotations

import dataclasses
import threading
import time

import httpx
import pytest

from chatapp.engine.inside.attention import AttentionUnavailable
from chatapp.engine.backend import NOT_REPORTED, Backend
from chatapp.engine.chat.engine import Engine
from chatapp.engine.opening import connect_engine
from chatapp.engine.events import ContextTrimmed, Message, PrefillDone, PrefillProgress, TextDelta, TurnDone
from chatapp.engine.local.llama import LlamaRuntime, LoadOptions
from chatapp.engine.local.backend import LocalBackend
from chatapp.engine.models.quant import model_info
from chatapp.engine.server.backend import ServerBackend
from chatapp.engine.stats import LiveDecode
from chatapp.errors import ContextFullError, ServerError
from tests.engine.token_samples import SAMPLES

from .conftest import N_CTX, SETTINGS

LONG = "Summarise this text. " + " ".join(
    f"Sentence {i} says that the number {i} follows {i - 1} and precedes {i + 1}." for i in range(30))
CONVERSATIONS = [
    ["Name a fruit.", "Name another one."],
    ["Explain what a KV cache is in one sentence.", "Why does it speed up decoding?"],
    [LONG, "Shorter please."],  # 600 prompt tokens: prefilled in several batches on both sides
]


@pytest.fixture(scope="module")
def local(default_model_path):
    engine = Engine(LocalBackend(LlamaRuntime(default_model_path, LoadOptions(n_ctx=N_CTX, flash_attn=True))), SETTINGS)
    yield engine
    engine.close()


@pytest.fixture
def remote(llama_server):
    """A fresh engine on the session's server, its slot emptied."""
    engine = connect_engine(SETTINGS.replace(server=llama_server.url))
    engine.clear_cache()
    yield engine
    engine.close()


def turn(engine: Engine, text: str):
    events = list(engine.send(text))
    assert isinstance(events[-1], TurnDone)
    return events, events[-1].record


def slot_tokens(url: str) -> int:
    """How many tokens the server says slot 0 holds, once it is idle."""
    deadline = time.monotonic() + IDLE_LIMIT
    while time.monotonic() < deadline:
        slot = httpx.get(f"{url}/slots", timeout=30).json()[0]
        if not slot["is_processing"]:
            return slot.get("n_prompt_tokens", 0)
        time.sleep(0.05)
    pytest.fail(f"slot 0 of llama-server at {url} was still processing after {IDLE_LIMIT:.0f} s")


IDLE_LIMIT = 120.0
"""Seconds a slot may stay busy after its turn ended (a guard, not a measurement)."""


# --- what the server runs ---------------------------------------------------------------------
def test_the_summary_is_what_the_server_reports(remote, llama_server, default_model_path):
    s = remote.summary
    info = model_info(default_model_path)
    assert isinstance(remote._backend, Backend)  # the protocol, checked at runtime
    assert (s.kind, s.backend, s.server) == ("llama-server", "llama-server", llama_server.url)
    assert s.location == f"llama-server {llama_server.url}" and s.build.startswith("b")
    assert (s.name, s.quant, s.n_ctx) == ("smollm2-135m-instruct", "Q4_1", N_CTX)
    assert (s.n_params, s.size_bytes) == (info.n_params, info.weight_bytes)
    # The server's file is readable here and is that very model: its header is honest to use.
    assert s.local_file == str(default_model_path.resolve()) and s.n_layer == info.n_layer
    # What the server does not report stays unknown.
    assert (s.kv_type, s.kv_bytes_per_token, s.threads, s.layers_offloaded, s.flash_attn) == (None,) * 5
    assert NOT_REPORTED == "not reported by the server"


def test_the_fingerprint_names_server_model_context_template_and_build(remote):
    fingerprint = remote.fingerprint()
    assert list(fingerprint) == ["backend", "model_id", "model", "quant", "n_ctx", "template_sha256", "server_build"]
    assert fingerprint["backend"] == "llama-server" and fingerprint["n_ctx"] == N_CTX
    assert fingerprint["model_id"] == f"{remote.summary.path}#{remote.summary.size_bytes}"


# --- replies --------------------------------------------------------------------------------
@pytest.mark.parametrize("prompts", CONVERSATIONS, ids=["fruit", "kv-cache", "long"])
def test_greedy_replies_equal_the_in_process_ones(local, remote, prompts):
    local.new_chat()
    local.clear_cache()
    for text in prompts:
        _, here = turn(local, text)
        _, there = turn(remote, text)
        assert there.reply == here.reply
        assert (there.prompt_tokens, there.generated_tokens, there.finish_reason) == \
               (here.prompt_tokens, here.generated_tokens, here.finish_reason)
    follow_up = remote.messages + [Message("user", "Thanks.")]
    assert remote.render(follow_up) == local.render(follow_up)


def test_the_record_holds_the_servers_own_figures(remote, llama_server):
    events, first = turn(remote, "Name a fruit.")
    _, second = turn(remote, "Name another one.")
    assert first.cached_tokens == 0 and first.prefill_tokens == first.prompt_tokens
    # Turn 2 reuses the slot's cache: the whole first exchange, bar what was never evaluated.
    assert first.prompt_tokens < second.cached_tokens < second.prompt_tokens
    assert second.prefill_tokens == second.prompt_tokens - second.cached_tokens
    timings = second.extra["server_timings"]
    assert (timings["cache_n"], timings["prompt_n"]) == (second.cached_tokens, second.prefill_tokens)
    assert second.decode_ms == timings["predicted_ms"] and round(second.decode_tps, 2) == \
           round(timings["predicted_per_second"], 2)
    # The engine's list of cached ids is the server's slot, token for token in count.
    assert second.kv_used == remote.kv_used() == slot_tokens(llama_server.url)
    assert remote.cached_tokens()[:second.prompt_tokens] == remote.prompt_ids(remote.messages[:-1])
    assert [e for e in events if isinstance(e, PrefillProgress)][-1].done == first.prefill_tokens


def test_the_token_view_marks_cached_prefilled_and_generated(remote):
    turn(remote, "Name a fruit.")
    events, record = turn(remote, "Name another one.")
    view = events[-1].view
    origins = [p.origin for p in view]
    assert origins.count("cached") == record.cached_tokens
    assert origins.count("prefilled") == record.prefill_tokens
    assert len(view) == record.kv_used
    assert {p.role for p in view} >= {"system", "user", "assistant", "template"}
    # No split character shows as U+FFFD (a token that *is* U+FFFD, which this vocabulary has, may).
    assert all("\ufffd" not in p.token.piece or p.token.raw == "\ufffd".encode() for p in view)


def test_split_characters_in_a_reply_keep_their_ids(local, remote):
    """The server streams a split character's tokens as one piece; their ids must still be
    the ones the model generated (the in-process cache holds the same ones)."""
    prompt = "Write the Japanese word for cat in Japanese script, then a cat emoji."
    local.new_chat()
    local.clear_cache()
    _, here = turn(local, prompt)
    events, there = turn(remote, prompt)
    assert there.reply == here.reply and any(ord(c) > 0x2FFF for c in there.reply)
    held = remote.cached_tokens()
    # A reply cut by max_tokens leaves its last token unevaluated on the server.
    expected = local.cached_tokens()[:len(held)]
    assert held == expected and len(held) == len(local.cached_tokens()) - (there.finish_reason == "length")
    generated = [p.token for p in events[-1].view if p.origin == "generated"]
    assert [t.id for t in generated] == held[there.prompt_tokens:]
    # Cut by max_tokens, the cache may end inside a character (its last token never ran).
    assert there.reply.startswith("".join(t.piece for t in generated).rstrip("\ufffd"))


# --- tokens ---------------------------------------------------------------------------------
@pytest.mark.parametrize("text", SAMPLES)
def test_pieces_join_back_and_match_the_in_process_tokenizer(local, remote, text):
    tokens = remote.tokenize(text)
    assert "".join(t.piece for t in tokens) == text
    assert not any(t.special for t in tokens)
    assert tokens == local.tokenize(text)


def test_a_templated_prompt_marks_the_same_special_tokens(local, remote):
    messages = [Message("system", "Be brief."), Message("user", "Hi 🦙 <|im_start|> typed")]
    text = remote.render(messages)
    assert text == local.render(messages)
    ids = remote.prompt_ids(messages)
    assert ids == local.prompt_ids(messages)
    there = remote._backend.describe(ids)  # the backend's view, as the Tokens panel gets it
    here = local._backend.describe(ids)
    assert there == here
    assert "".join(t.piece for t in there) == text
    assert {t.piece for t in there if t.special} == {"<|im_start|>", "<|im_end|>"}


# --- stopping -------------------------------------------------------------------------------
def test_the_server_shows_no_attention_and_says_why(remote):
    turn(remote, "Name a fruit.")
    found = remote.attention()
    assert isinstance(found, AttentionUnavailable)
    assert found.reason.startswith("llama-server does not expose attention weights")


def test_stop_mid_reply_keeps_it_and_the_next_turn_reuses_the_slot(remote, llama_server):
    remote.set_generation(max_tokens=400)
    deltas, events = [], remote.send("Write a very long story about a ship.")
    for event in events:
        if isinstance(event, TextDelta):
            deltas.append(event.text)
            if len(deltas) == 5:
                threading.Thread(target=remote.stop).start()  # as the UI does, from another thread
        if isinstance(event, TurnDone):
            record = event.record
    assert record.finish_reason == "stopped" and record.reply == "".join(deltas)
    assert remote.messages[-1] == Message("assistant", record.reply, stopped=True)
    held = remote.cached_tokens()
    assert len(held) <= slot_tokens(llama_server.url)  # the server may have gone on a little
    remote.set_generation(max_tokens=24)
    _, after = turn(remote, "Give the ship a name.")
    assert after.finish_reason in ("stop", "length") and after.reply
    assert after.cached_tokens >= len(held) - 1 > 0


def test_stop_during_prefill_ends_the_turn_before_the_prompt_is_read(remote):
    long = " ".join(f"Line {i}: the quick brown fox jumps over the lazy dog." for i in range(60))
    events = []
    for event in remote.send(long + "\nHow many lines?"):
        events.append(event)
        if isinstance(event, PrefillProgress):
            remote.stop()
    record = events[-1].record
    assert record.finish_reason == "stopped" and record.reply == ""
    assert record.prefill_tokens < record.prompt_tokens - record.cached_tokens
    assert not any(isinstance(e, TextDelta) for e in events)
    assert remote.messages[-1] == Message("assistant", "", stopped=True)
    _, after = turn(remote, "Never mind. Say hello.")
    assert after.reply and after.finish_reason in ("stop", "length")


def test_regenerate_reuses_no_more_than_before_and_repeats_a_greedy_reply(remote):
    _, first = turn(remote, "Name a fruit.")  # nothing was cached: regenerate starts from an empty slot
    again = list(remote.regenerate())[-1].record
    assert (again.reply, again.cached_tokens, again.prefill_tokens) == \
           (first.reply, first.cached_tokens, first.prefill_tokens)
    _, second = turn(remote, "Name another one.")  # reused a prefix: regenerate keeps just that much
    again = list(remote.regenerate())[-1].record
    assert (again.reply, again.cached_tokens, again.prefill_tokens) == \
           (second.reply, second.cached_tokens, second.prefill_tokens)


# --- the context policy ---------------------------------------------------------------------------
def test_a_small_server_context_drops_old_turns_then_refuses(another_server):
    server = another_server(n_ctx=256)
    engine = connect_engine(SETTINGS.replace(server=server.url, max_tokens=16))
    try:
        assert engine.n_ctx == 256
        trimmed = []
        for i in range(12):
            events, record = turn(engine, f"Question {i}: tell me one fact about the number {i}.")
            trimmed += [e for e in events if isinstance(e, ContextTrimmed)]
            assert record.prompt_tokens + 16 <= 256
        assert trimmed and all(t.prompt_tokens_after < t.prompt_tokens_before for t in trimmed)
        before = engine.messages
        with pytest.raises(ContextFullError, match="context holds 256"):
            list(engine.send("word " * 400))
        assert engine.messages == before
    finally:
        engine.close()


def test_the_servers_own_context_refusal_is_the_same_one_line_error(another_server):
    """A server whose context is smaller than the engine believes (restarted with a smaller -c)."""
    server = another_server(n_ctx=256)
    backend = ServerBackend.connect(server.url)
    backend.summary = dataclasses.replace(backend.summary, n_ctx=4096)
    engine = Engine(backend, SETTINGS)
    try:
        before = engine.messages
        with pytest.raises(ContextFullError, match="llama-server's context holds 256") as caught:
            list(engine.send("word " * 400))
        assert "\n" not in caught.value.one_line()
        assert engine.messages == before
    finally:
        engine.close()


# --- a server that goes away ---------------------------------------------------------------------
def test_a_server_killed_mid_reply_keeps_the_reply_and_says_so(another_server):
    server = another_server()
    engine = connect_engine(SETTINGS.replace(server=server.url, max_tokens=400))
    try:
        text = ""
        for event in engine.send("Write a very long story about a ship."):
            if isinstance(event, TextDelta):
                text += event.text
                if server.popen.poll() is None:
                    server.popen.kill()
            if isinstance(event, TurnDone):
                record = event.record
                assert isinstance(event.view, list)  # built without the server: no error, maybe empty
        assert record.finish_reason == "stopped" and record.reply == text != ""
        assert "mid-reply" in record.extra["server_error"] and "kept" in record.extra["server_error"]
        assert engine.messages[-1] == Message("assistant", text, stopped=True)
        before = engine.messages
        server.popen.wait(timeout=30)  # gone for good: its sockets are closed (a stale pooled one is retried)
        with pytest.raises(ServerError, match="cannot connect"):
            list(engine.send("Are you there?"))
        assert engine.messages == before  # the refused message is not half-added
    finally:
        engine.close()


# --- live figures -------------------------------------------------------------------------------
def test_live_decode_figures_grow_while_the_reply_streams_and_end_at_the_records(remote):
    """Every text event carries the server's per-token timings (timings_per_token): its decode
    count rises with each token to the record's, at a positive speed."""
    remote.set_generation(max_tokens=48)
    events, record = turn(remote, "Write a very long story about a ship.")
    # Cut by max_tokens, the last streamed token has text, so the last event has the final count.
    assert record.finish_reason == "length" and record.decode_tokens == 47
    live = [e.live for e in events if isinstance(e, TextDelta)]
    assert len(live) > 10 and all(isinstance(figures, LiveDecode) for figures in live)
    counts = [figures.decode_tokens for figures in live]
    assert counts == sorted(set(counts)), counts  # strictly rising: one event per new token or more
    assert counts[-1] == record.decode_tokens
    assert [f.kv_used for f in live] == [record.prompt_tokens + n for n in counts]
    assert live[-1].kv_used == record.kv_used
    timed = [f for f in live if f.decode_tokens > 0]
    assert timed and all(f.decode_ms > 0 and f.decode_tps > 0 for f in timed)
    assert [f.decode_ms for f in timed] == sorted(f.decode_ms for f in timed)
    assert timed[-1].decode_ms <= record.decode_ms


def test_mid_reply_the_cache_holds_the_prompt_and_the_reply_so_far(remote):
    """The Tokens panel reads a streaming reply's tokens from the cache (issue 59): over the
    server, the slot's tokens mid-reply are the prompt and the ids streamed so far, never the
    turn before's, and they end as the cache's tokens after the turn."""
    remote.set_generation(max_tokens=24)
    turn(remote, "Write a long story about a ship.")  # a turn before whose tokens must not show through
    seen, prompt = [], None
    for event in remote.send("And one about a lighthouse, please."):
        if isinstance(event, PrefillDone):
            prompt = event.prompt_tokens
        elif isinstance(event, TextDelta):
            seen.append(remote.cached_tokens())
    final = remote.cached_tokens()
    assert prompt is not None and len(seen) > 10
    for ids in seen:  # the stream's last id may be past what the slot reports kept at the end
        assert ids[:len(final)] == final[:len(ids)] and len(ids) >= prompt
    assert len(seen[-1]) > len(seen[0]) and len(seen[-1]) >= len(final) - 2
