"""Drafting at automatic threads, whose count follows the load: every count a turn's steps ran
on is checked after the turn, and a turn starting on a count not yet checked still drafts on
the counts whose check passed, on the real model with an f16 cache (where no prior lets a step
draft before a check)."""

from __future__ import annotations

from chatapp.engine.local import exact_batches
from chatapp.engine.local.drafting import LocalDrafting
from chatapp.engine.local.exact_batches import cached_check
from chatapp.engine.local.llama import LlamaRuntime, LoadOptions
from tests.engine.local.exactness import measured_exact


def test_a_count_the_load_moves_a_turn_to_is_checked_after_it_and_drafts_from_then_on(default_model_path):
    """tests/cli/test_draft_defaults_cli.py failed once under load: the thread count moved with
    the load to one no check was made on; its steps decoded plainly, and as only the count a turn
    started on was checked after it, no later turn drafted there either."""
    rt = LlamaRuntime(default_model_path, LoadOptions(n_ctx=1024, n_threads=2, n_threads_batch=2, flash_attn=True))
    try:
        assert exact_batches.prior_exact(rt) == ""  # an f16 cache: only a check lets a step draft
        threads = [1]
        drafting = LocalDrafting(rt, threads=lambda: threads[0])
        drafting.set("ngram", 8)
        assert not drafting.for_turn().active  # nothing checked yet: this turn decodes plainly
        threads[0] = 2  # the load let a step run on two threads
        assert not drafting.exact_at(2)
        drafting.after_turn()
        one, two = cached_check(rt, 1), cached_check(rt, 2)
        assert one is not None and two is not None  # both counts checked, and kept on disk
        # Where this was written one thread computes the long-context attention in one piece
        # (exact_batches) and is exact; what decoding both ways finds here is what counts.
        assert one.passed == measured_exact(default_model_path, rt.kv_tokens, lambda text: rt.tokenize(
            text, special=False), threads=1, flash_attn=True)
        assert drafting.exact_at(1) and drafting.exact_at(2) == two.passed
        threads[0] = 3  # a turn starting on a count not checked yet: its steps on one thread draft
        turn = drafting.for_turn()
        assert turn.active == one.passed and drafting.record(3)["draft_check"] == "after this turn"
        assert drafting.exact_at(1) == one.passed and not drafting.exact_at(3)  # three threads: plainly until checked
    finally:
        rt.close()
