"""`--draft ngram` at the default KV type and automatic threads: it drafts, replies stay those of
plain greedy decoding, and the exactness verdict is checked once and kept for later processes."""

import functools
import json
import os

import llama_cpp

from chatapp.engine.local.exact_batches import CACHE
from tests.engine.local.exactness import measured_exact

COPY = ("Repeat the following paragraph exactly:\n\nThe old lighthouse stood on a rocky point at the edge of the "
        "bay. Every evening the keeper climbed the spiral stairs, trimmed the wick and polished the great glass "
        "lens until it shone. Ships passing in the night saw its beam sweep across the water.")
# draft_max 8: the first process checks batches up to draft_max + 1 after its turn, and under a
# heavy load the check up to 33 ran past the harness's 300 s per process.
COMMON = ("ask", COPY, "--json", "--temperature", "0", "--max-tokens", "60", "--ctx", "1024", "--draft-max", "8")


def one(out) -> dict:
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


@functools.cache
def q8_0_batches_exact(model, threads: int = 2) -> bool:
    """Whether verify batches up to draft_max + 1 give single steps' logits at the configuration
    drafting runs in (q8_0, flash attention, `threads`), measured here by decoding both ways. The
    check in the process ran after its turn, over the conversation; this one starts from an empty
    cache, at the same depths: which kernels run depends on the depth and the batch, not the text."""
    vocab = llama_cpp.Llama(model_path=str(model), vocab_only=True, verbose=False)
    try:
        return measured_exact(model, [], lambda text: vocab.tokenize(text.encode(), add_bos=False, special=False),
                              threads=threads, flash_attn=True, kv_type="q8_0", largest=9)
    finally:
        vocab.close()


def test_drafting_at_defaults_drafts_and_the_verdict_is_reused_by_the_next_process(chatapp_exe, isolated_dirs,
                                                                                   default_model_path):
    verdicts = os.path.join(isolated_dirs["XDG_CACHE_HOME"], "chatapp", f"{CACHE}.json")
    # Fixed threads, so that replies can be compared; the KV type is the default (f16).
    first = one(chatapp_exe(*COMMON, "--draft", "ngram", "--threads", "2"))
    # No verdict yet: a q8_0 cache with flash attention and Q4_1 weights is exact by llama.cpp's
    # kernels, so the first process drafts on that prior and checks after its turn (never before
    # a first token).
    assert first["draft"] == "ngram" and first["draft_check"] == "prior (checking after this turn)"
    assert first["decode_steps"] <= first["decode_tokens"]
    assert "q8_0 instead of f16" in first["draft_config"]
    assert os.path.exists(verdicts)
    kept = os.stat(verdicts).st_mtime_ns
    second = one(chatapp_exe(*COMMON, "--draft", "ngram", "--threads", "2"))
    assert second["draft_check"] == "cache"  # not checked again
    assert os.stat(verdicts).st_mtime_ns == kept
    assert "q8_0 instead of f16" in second["draft_config"]
    # The second process drafts exactly where decoding both ways finds batches exact on this
    # machine and build (on this one they are; an ARM or AVX-512 machine may find otherwise).
    exact = q8_0_batches_exact(default_model_path)
    assert (second["draft"] == "ngram" and second["draft_accepted"] > 0) == exact, (exact, second)
    assert (second["decode_steps"] < second["decode_tokens"]) == exact
    # The reply is plain greedy decoding's in the configuration drafting runs (a q8_0 cache). The
    # first process drafted on the prior before its check: its reply is plain decoding's only
    # where the prior holds.
    plain = one(chatapp_exe(*COMMON, "--draft", "off", "--threads", "2", "--kv-type", "q8_0"))
    assert plain["draft"] == "off" and "draft_config" not in plain
    assert second["reply"] == plain["reply"]
    assert (first["reply"] == plain["reply"]) or not exact


def test_drafting_with_automatic_threads_drafts_once_its_thread_count_is_checked(chatapp_exe, default_model_path):
    # Automatic threads follow the load, so a turn's steps may run on a count it did not start
    # on. Under load this once drafted in no turn: only the count a turn started on was checked
    # after it, and the turn was judged on whichever count was current when drafting was last
    # set. Now every count a turn's steps ran on is checked after it, and each turn is judged on
    # the count it starts on (tests/engine/local/test_drafting_threads.py, where no prior holds);
    # here the first turn drafts on the prior, and the later ones on their checked counts.
    out = chatapp_exe("ask", COPY, "Again, please, exactly the same.", "Once more.", "--json", "--temperature", "0",
                      "--max-tokens", "60", "--ctx", "1024", "--draft-max", "8", "--draft", "ngram")
    assert out.returncode == 0, out.stderr
    turns = [json.loads(line) for line in out.stdout.splitlines()]
    assert turns[0]["draft"] == "ngram" and turns[0]["draft_check"] == "prior (checking after this turn)"
    # Automatic threads run on one or two here: a later turn drafts where its count checks exact
    # (when only one count does, which count a turn runs on follows the load: nothing to assert).
    exact = {q8_0_batches_exact(default_model_path, threads, ) for threads in (1, 2)}
    drafted = any(t["draft"] == "ngram" and t["draft_accepted"] > 0 for t in turns[1:])
    if len(exact) == 1:
        assert drafted == exact.pop(), turns
