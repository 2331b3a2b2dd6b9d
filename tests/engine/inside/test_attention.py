"""Attention you can watch: llama.cpp's soft-max weights for the last turn, read from a replay
through a capture context with cb_eval, against the real default model."""

from __future__ import annotations

import threading
from dataclasses import replace

import numpy as np
import pytest

from chatapp.engine.inside import attention
from chatapp.engine.inside.attention import AttentionMap, AttentionUnavailable, SoftMaxCollector, rows_within_cap
from chatapp.engine.backend import Backend, GenerationSettings
from chatapp.engine.local.llama import CAPTURE_BATCH, LlamaRuntime, LoadOptions, capture_batch, has_eval_callback
from chatapp.engine.local.backend import LocalBackend

from tests.engine.conftest import make_engine, run_turn, runtime_of

QUESTION = "What is the capital of France?"
FOLLOW_UP = "And of Italy?"
ROW_SUM_TOLERANCE = 1e-3
"""float16 keeps 11 significant bits: each kept weight is within 2**-11 of itself, so a row's sum is too."""
NEXT_TOKEN_AGREEMENT = 0.90
"""Share of a greedy reply's rows at which the replay's argmax must be the decoded next token.
Measured on six 128-token greedy replies of the default model: 94-100% a reply (97% overall)
with the chat's cache f16, 97-100% (98%) with q8_0. Every disagreement seen was a near tie (the
replay's top logit within 0.2 of the decoded token's, where the median top-two margin is 1.6):
decode steps one token at a time with flash attention, the replay runs 256-token batches
without it, and a chat without flash attention disagrees as often. A replay that were not the
decode's computation (rows misplaced by one, another model, the wrong tokens) would agree at
few rows, if any."""


def check_rows(found: AttentionMap) -> None:
    """Every kept row, averaged and one head at a time: sums to 1 over positions 0..p, is exactly
    0 past p (the causal mask), and gives the query's own position some weight."""
    n = len(found.tokens)
    blocks = [(found.mean[layer], layer) for layer in found.layers]
    if found.heads is not None:
        blocks += [(found.heads[head], found.head_layer) for head in range(found.heads.shape[0])]
    for rows, layer in blocks:
        for row, position in enumerate(found.positions):
            weights = rows[row].astype(np.float64)
            assert abs(weights[: position + 1].sum() - 1) <= ROW_SUM_TOLERANCE, (layer, position)
            assert not weights[position + 1: n].any(), (layer, position)
            assert weights[position] > 0, (layer, position)


@pytest.fixture
def answered(greedy_chat):
    run_turn(greedy_chat, QUESTION)
    return greedy_chat


def test_the_last_turns_reply_rows_in_every_layer(answered):
    rt = runtime_of(answered)
    found = answered.attention(head_layer=7)
    assert isinstance(found, AttentionMap)
    assert list(found.tokens) == rt.kv_tokens  # exactly the cache after the turn
    prompt = answered.prompt_ids(answered.context_messages()[:-1])
    assert found.reply_start == len(prompt) and found.rows == found.reply_tokens > 0
    assert found.layers == tuple(range(rt.info.n_layer)) and set(found.n_heads.values()) == {9}
    assert found.mean.dtype == np.float16 and found.mean.shape == (30, found.rows, len(found.tokens))
    assert found.head_layer == 7 and found.heads.shape == (9, found.rows, len(found.tokens))
    check_rows(found)
    assert found.replayed_next.dtype == np.int32 and found.replayed_next.shape == (found.rows,)
    # The heads-averaged row is the mean of the heads' rows (both kept as float16).
    layer_7 = found.heads.astype(np.float32).mean(axis=0)
    assert np.allclose(layer_7, found.mean[7].astype(np.float32), atol=2e-3)
    assert "without flash attention" in found.how() and f"{len(found.tokens)} tokens" in found.how()


def test_the_replay_predicts_the_greedy_replys_next_tokens(runtime):
    """The replay is the computation that chose the reply: for a greedy turn, its logits' argmax
    at reply row i (position reply_start + i) is the token the chat decoded next, reply token
    i + 1, but for near ties (NEXT_TOKEN_AGREEMENT)."""
    engine = make_engine(runtime, "You are a concise assistant.", GenerationSettings(temperature=0.0, max_tokens=128))
    run_turn(engine, "Explain how a hash table works.")
    found = engine.attention()
    agreeing, compared = found.next_token_matches()
    assert compared == found.reply_tokens - 1 > 100  # every row but the last, whose next token was never cached
    decoded = np.asarray(found.tokens[found.reply_start + 1:])
    missed = np.flatnonzero(found.replayed_next[:compared] != decoded)
    assert agreeing == compared - len(missed)
    first = ""
    if len(missed):
        row = int(missed[0])
        piece = lambda token: runtime.token_bytes(int(token)).decode("utf-8", "replace")  # noqa: E731
        first = (f"; first at reply row {row} (position {found.reply_start + row}): decoded "
                 f"{piece(decoded[row])!r}, replay's argmax {piece(found.replayed_next[row])!r}")
    assert agreeing >= NEXT_TOKEN_AGREEMENT * compared, f"the replay agrees at {agreeing} of {compared} rows{first}"
    assert f"The replay predicts the reply's next token at {agreeing} of {compared} rows." in found.how()


def test_a_second_capture_reads_the_same_weights(answered):
    first, second = answered.attention(head_layer=3), answered.attention(head_layer=3)
    assert np.array_equal(first.mean, second.mean) and np.array_equal(first.heads, second.heads)
    assert np.array_equal(first.replayed_next, second.replayed_next)


def test_capturing_leaves_the_cache_and_the_replies_as_they_were(runtime):
    """The capture runs in a context of its own: the chat's cache, byte for byte, and the next
    turn's greedy reply are what they are without it; the chat's context never gets a callback."""
    def two_turns(capture: bool) -> list[str]:
        runtime.clear_kv()
        engine = make_engine(runtime, "You are a concise assistant.")
        replies = [run_turn(engine, QUESTION)[1].reply]
        if capture:
            cache, state = runtime.kv_tokens, runtime.seq_state()
            assert isinstance(engine.attention(head_layer=0), AttentionMap)
            assert runtime.kv_tokens == cache and runtime.seq_state() == state
        replies.append(run_turn(engine, FOLLOW_UP)[1].reply)
        return replies

    assert two_turns(capture=True) == two_turns(capture=False)
    assert not has_eval_callback(runtime)


def test_rows_across_replay_batches_match_a_shorter_replay(runtime):
    """Reply rows that straddle a replay batch boundary land at their positions: a replay that
    ends earlier, with other batches, gives the same rows for the positions both keep."""
    text = " ".join(f"Item {i} is a {['red', 'green', 'blue'][i % 3]} box." for i in range(40))
    tokens = runtime.tokenize(text, special=False, add_bos=True)[: CAPTURE_BATCH + 40]
    start = CAPTURE_BATCH - 16
    backend = LocalBackend(runtime)
    long = backend.attention(tokens, start, 4, threading.Event())
    short = backend.attention(tokens[: CAPTURE_BATCH + 4], start, 4, threading.Event())
    check_rows(long)
    check_rows(short)
    n = short.rows
    assert long.rows == 56 and n == 20
    assert np.allclose(long.mean[:, :n, : len(short.tokens)], short.mean, atol=2e-3)
    assert np.allclose(long.heads[:, :n, : len(short.tokens)], short.heads, atol=2e-3)
    assert long.replayed_next.shape == (56,) and short.replayed_next.shape == (20,)


def test_gemmas_sliding_layers_attend_within_their_window(gemma_path):
    """gemma-3-270m: 18 layers, five sliding-window layers (512 positions) to one global. Columns
    are positions: a sliding layer's row for position p is exactly 0 before p - 511."""
    from chatapp.engine.inside.anatomy import anatomy

    window = anatomy(gemma_path).sliding_window
    rt = LlamaRuntime(gemma_path, LoadOptions(n_ctx=1024))
    try:
        text = " ".join(f"Item {i} is a {['red', 'green', 'blue'][i % 3]} box." for i in range(80))
        tokens = rt.tokenize(text, special=False, add_bos=True)[: window + 100]
        found = LocalBackend(rt).attention(tokens, window + 80, None, threading.Event())
        assert found.layers == tuple(range(18)) and set(found.n_heads.values()) == {4}
        sliding, full = [], []
        for layer in found.layers:
            for position in found.positions:
                weights = found.weights(position, layer).astype(np.float64)
                assert abs(weights.sum() - 1) <= ROW_SUM_TOLERANCE
                if position == found.positions.start:
                    (full if weights[: position - window + 1].any() else sliding).append(layer)
                else:  # every row of a layer is of the same kind
                    assert weights[: position - window + 1].any() == (layer in full), (layer, position)
        assert (window, len(sliding), full) == (512, 15, [5, 11, 17])
    finally:
        rt.close()


def test_a_quantized_chat_cache_is_replayed_with_an_f16_cache(default_model_path):
    rt = LlamaRuntime(default_model_path, LoadOptions(n_ctx=512, kv_type="q8_0"))
    try:
        engine = make_engine(rt)
        run_turn(engine, QUESTION)
        found = engine.attention()
        assert isinstance(found, AttentionMap) and (found.kv_type, found.chat_kv_type) == ("f16", "q8_0")
        assert "KV cache f16 (the chat's cache is q8_0)" in found.how()
        check_rows(found)
    finally:
        rt.close()


def test_what_cannot_be_captured_says_why(greedy_chat, monkeypatch):
    assert greedy_chat.attention() == AttentionUnavailable("no turn to look at yet: send a message first")
    run_turn(greedy_chat, QUESTION)
    stop = threading.Event()
    stop.set()
    assert greedy_chat.attention(stop=stop) == AttentionUnavailable("stopped before the replay finished")
    backend = LocalBackend(runtime_of(greedy_chat))
    tokens = runtime_of(greedy_chat).kv_tokens
    assert backend.attention(tokens, len(tokens), None, threading.Event()) == \
        AttentionUnavailable("the last turn has no reply tokens to look at")
    greedy_chat.new_chat()
    assert isinstance(greedy_chat.attention(), AttentionUnavailable)
    # A GPU build that offloads the model: this machine has none, so the runtime's report is set
    # to what such a build gives (llama.RuntimeInfo.backend), to reach the check.
    monkeypatch.setattr(backend.runtime, "info", replace(backend.runtime.info, backend="CUDA"))
    reason = backend.attention(tokens, len(tokens) - 3, None, threading.Event()).reason
    assert reason.startswith("attention capture is not available on CUDA")


def test_a_long_reply_keeps_its_first_rows_under_the_memory_cap(answered, monkeypatch):
    n = len(answered.cached_tokens())
    monkeypatch.setattr(attention, "MEMORY_CAP", 3 * (30 + 9) * n * 2)
    found = answered.attention()
    assert found.rows == 3 < found.reply_tokens and found.mean.shape[1] == 3
    assert found.replayed_next.shape == (3,) and found.next_token_matches()[1] == 3
    check_rows(found)


def test_long_contexts_replay_in_smaller_batches():
    assert capture_batch(4096, 9) == CAPTURE_BATCH
    assert capture_batch(32768, 64) == 32  # 32 x 32768 x 64 float32 weights: 256 MiB
    assert capture_batch(131072, 128) == 16


def test_the_local_backend_is_still_a_backend(runtime):
    assert isinstance(LocalBackend(runtime), Backend)


# --- the collector alone -----------------------------------------------------------------------
def test_the_collector_wants_only_kept_reply_rows():
    collector = SoftMaxCollector(n_tokens=600, reply_start=250, rows=300, n_layer=2, head_layer=None)
    assert collector.rows_wanted(0, 256) == (250, 256)
    assert collector.rows_wanted(256, 256) == (0, 256)
    assert collector.rows_wanted(512, 88) == (0, 38)  # rows 550.. are past the kept 300
    assert SoftMaxCollector(300, 100, 50, 1, None).rows_wanted(0, 100) is None


def test_the_collector_averages_heads_and_drops_padding_columns():
    collector = SoftMaxCollector(n_tokens=5, reply_start=3, rows=2, n_layer=2, head_layer=1)
    weights = np.zeros((2, 2, 256), dtype=np.float32)  # two heads, rows for positions 3 and 4
    weights[0, 0, :4] = [0.25, 0.25, 0.25, 0.25]
    weights[1, 0, :4] = [1.0, 0.0, 0.0, 0.0]
    weights[:, 1, :5] = 0.2
    collector.take(1, 3, weights)
    assert collector.mean.shape == (2, 2, 5)
    assert collector.mean[1, 0].tolist() == [0.625, 0.125, 0.125, 0.125, 0.0]
    assert np.allclose(collector.mean[1, 1], 0.2, atol=1e-3) and not collector.mean[0].any()
    assert collector.heads[1, 0].tolist() == [1.0, 0.0, 0.0, 0.0, 0.0] and collector.n_heads == {1: 2}
    with pytest.raises(ValueError, match="layer 2 of 2"):
        collector.take(2, 3, weights)


def test_the_collector_keeps_each_rows_predicted_next_token():
    collector = SoftMaxCollector(n_tokens=8, reply_start=5, rows=3, n_layer=1, head_layer=None)
    collector.take_next(5, np.array([11, 12]))
    assert collector.replayed_next() is None  # not every kept row has one yet
    collector.take_next(7, np.array([13]))
    assert collector.replayed_next().tolist() == [11, 12, 13]
    with pytest.raises(ValueError, match="not kept reply rows"):
        collector.take_next(7, np.array([1, 2]))


def test_rows_within_the_cap():
    assert rows_within_cap(100, 1000, 30, 9, cap=10**9) == 100
    assert rows_within_cap(100, 1000, 30, 9, cap=39 * 1000 * 2 * 7) == 7
    assert rows_within_cap(100, 1000, 30, 9, cap=1) == 1
