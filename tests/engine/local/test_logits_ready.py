"""LlamaRuntime.logits_ready: a turn may draw its first token from the row the last decode left
only while that row belongs to the cache's last token (prefill while typing relies on it)."""

from __future__ import annotations

import numpy as np

from chatapp.engine.local.llama import VerifyTarget

PROMPT = "<|im_start|>user\nName three rivers in Europe.<|im_end|>\n<|im_start|>assistant\n"


def test_the_row_is_ready_after_a_decode_to_the_cache_end_and_gone_after_any_change(runtime):
    tokens = runtime.tokenize(PROMPT, special=True)
    assert not runtime.logits_ready  # nothing decoded yet
    runtime.prefill(tokens)
    assert runtime.logits_ready
    waiting = runtime.sampler(temperature=0.0).logits().copy()
    runtime.keep_kv_prefix(len(tokens))  # no change: still the same row
    assert runtime.logits_ready
    runtime.keep_kv_prefix(len(tokens) - 8)
    assert not runtime.logits_ready
    runtime.prefill(tokens[-8:])  # the same end again, in a batch of 8
    assert runtime.logits_ready
    assert np.array_equal(runtime.sampler(temperature=0.0).logits(), waiting)
    runtime.decode_one(int(np.argmax(waiting)))
    assert runtime.logits_ready
    target = VerifyTarget(runtime, runtime.sampler(temperature=0.0))
    target.decode([int(np.argmax(waiting)), 11, 12])
    target.close()
    assert not runtime.logits_ready  # rows for every token; a rejection would cut the cache under the last
    runtime.clear_kv()
    assert not runtime.logits_ready
