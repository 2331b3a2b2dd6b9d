"""The check that verify batches give single steps' logits exactly, on the real models."""

from __future__ import annotations

import pytest

from chatapp.engine.local import exact_batches
from chatapp.engine.drafting.policy import DraftPolicy
from chatapp.config import Settings
from chatapp.engine.local.drafting import LocalDrafting, kv_for_drafting
from chatapp.engine.local.exact_batches import BatchCheck, batch_check, cached_check, check_batches
from chatapp.engine.local.llama import LlamaRuntime, LoadOptions
from tests.engine.local.exactness import measured_exact


@pytest.fixture(scope="module")
def smollm(default_model_path):
    rt = LlamaRuntime(default_model_path, LoadOptions(n_ctx=1024, kv_type="q8_0"))
    yield rt
    rt.close()


def fill(rt: LlamaRuntime, n: int) -> list[int]:
    rt.clear_kv()
    ids = rt.tokenize("Tell me everything about lighthouses and their keepers. " * 60, special=False)[:n]
    assert len(ids) == n
    rt.eval(ids)
    return ids


@pytest.mark.parametrize("cached", [0, 30, 300])
def test_with_a_q8_0_cache_the_check_finds_what_decoding_both_ways_finds_and_leaves_the_cache(smollm, cached):
    ids = fill(smollm, cached)
    check = check_batches(smollm, 9)
    exact = measured_exact(smollm.path, ids, lambda text: smollm.tokenize(text, special=False),
                           threads=smollm.threads[0], flash_attn=True, kv_type="q8_0")
    assert check.passed == exact and (not exact or check == BatchCheck(9, 9, 0.0))
    assert smollm.kv_tokens == ids and smollm.kv_cells_used() == len(ids) == smollm.n_cached


def test_the_check_times_every_batch_size_it_decodes(smollm):
    """What the draft policy starts from: a time ratio for every size (the figures themselves are
    the machine's and are not asserted: benchmarks/speculative.py --verify-cost prints them)."""
    fill(smollm, 0)
    check = check_batches(smollm, 9)
    assert check.ratios.keys() == set(range(2, 10))
    assert all(r > 0 for r in check.ratios.values())
    policy = DraftPolicy()
    policy.seed(check.ratios)
    cheapest = float("inf")  # the seeds as kept: never under one step, never dearer a token than a smaller size
    for m in range(2, 10):
        expected = min(max(check.ratios[m], 1.0), cheapest * m)
        assert policy.ratio(m) == pytest.approx(expected)
        cheapest = min(cheapest, expected / m)


def test_with_an_f16_cache_the_check_finds_what_decoding_both_ways_finds_and_drafting_follows_it(
        default_model_path):
    """Measured on the machine running the test (tests/engine/local/exactness.py), not remembered:
    where this was written, past 512 attended cells two threads split the attention of a single
    step (ggml's split-KV path) and not of a batch, while one thread computes it in one piece."""
    rt = LlamaRuntime(default_model_path, LoadOptions(n_ctx=1024, n_threads=2, n_threads_batch=2, flash_attn=True))
    try:
        ids = fill(rt, 30)
        tokens_of = lambda text: rt.tokenize(text, special=False)  # noqa: E731
        exact_on = {n: measured_exact(default_model_path, ids, tokens_of, threads=n, flash_attn=True) for n in (1, 2)}
        two = check_batches(rt, 9)
        assert rt.kv_tokens == ids and rt.kv_cells_used() == len(ids)
        assert two.passed == exact_on[2] and (two.passed or two.worst > 0)
        one = batch_check(rt, 9, 1)
        assert one.passed == exact_on[1] and rt.threads == (2, 2)
        threads = [2]
        drafting = LocalDrafting(rt, threads=lambda: threads[0])
        drafting._check = two  # what for_turn would have found on two threads
        state = drafting.set("ngram", 8)
        assert state.active == drafting.exact_at(2) == exact_on[2]
        if not exact_on[2]:
            assert "kv_type = q8_0" in state.off_because
        threads[0] = 1  # the policy chose one decode thread: that count's check (cached) applies
        assert drafting.set("ngram", 8).active == drafting.exact_at(1) == exact_on[1]
    finally:
        rt.close()


def test_gemma_is_checked_the_same_way(gemma_path):
    rt = LlamaRuntime(gemma_path, LoadOptions(n_ctx=1024, flash_attn=True))
    try:
        ids = fill(rt, 40)
        check = check_batches(rt, 9)
        assert rt.kv_tokens == ids and rt.kv_cells_used() == len(ids)
        # Where this was written gemma-3-270m Q4_K_M's batches differed from single steps (see the
        # module); what decoding both ways finds here is what the check must find.
        exact = measured_exact(gemma_path, ids, lambda text: rt.tokenize(text, special=False),
                               threads=rt.threads[0], flash_attn=True)
        assert check.passed == exact and (exact or (check.worst > 0 and 2 <= check.checked <= 9))
        drafting = LocalDrafting(rt)
        drafting._check = check  # what for_turn would have found
        state = drafting.set("ngram", 8)
        assert state.active == exact and (exact or "differently from single steps" in state.off_because)
    finally:
        rt.close()


def test_a_check_is_remembered_per_model_and_settings(smollm, monkeypatch):
    fill(smollm, 0)
    n = smollm.threads[0]
    assert cached_check(smollm, n) is None
    first = batch_check(smollm, 5, n)
    assert first == BatchCheck(5, 5) and cached_check(smollm, n) == first
    with monkeypatch.context() as trap:  # covered: a check run again fails here instead of agreeing
        trap.setattr(exact_batches, "check_batches", lambda *_: pytest.fail("a covered check was run again"))
        assert batch_check(smollm, 4, n) == first
        assert batch_check(smollm, 3, n, known=first) is first
    assert not first.covers(9) and BatchCheck(4, 3, 0.5).covers(33)
    assert batch_check(smollm, 9, n) == BatchCheck(9, 9) == cached_check(smollm, n)
    # The batch costs it timed come back from the cache too (JSON's string keys as sizes again).
    assert cached_check(smollm, n).ratios.keys() == set(range(2, 10))
    assert exact_batches.settings_key(smollm, n).endswith(f"|q8_0|flash_attn True|threads {n}")


def test_a_full_context_leaves_no_room_to_check_and_the_check_waits_for_a_later_turn(default_model_path):
    rt = LlamaRuntime(default_model_path, LoadOptions(n_ctx=256, flash_attn=True))
    try:
        ids = fill(rt, 250)
        assert check_batches(rt, 9) is None and rt.kv_tokens == ids
        drafting = LocalDrafting(rt)
        assert drafting.set("ngram", 8).active  # not checked yet
        turn = drafting.for_turn()
        assert not turn.active and "checking after this turn" in turn.off_because
        assert drafting.record(rt.threads[0])["draft_check"] == "after this turn"
        drafting.after_turn()  # no room: no verdict, and nothing kept on disk
        assert cached_check(rt, rt.threads[0]) is None
        assert drafting.state.active and not drafting.for_turn().active  # the next turn tries again
    finally:
        rt.close()


def test_drafting_asked_for_with_an_f16_cache_on_the_cpu_loads_q8_0_and_says_why():
    asked = Settings(draft="ngram")
    assert asked.kv_type == "f16"  # the default
    kv_type, why = kv_for_drafting(asked, on_gpu=False)
    assert kv_type == "q8_0" and "instead of f16" in why
    assert kv_for_drafting(asked.replace(draft="off"), on_gpu=False) == ("f16", "")
    assert kv_for_drafting(asked, on_gpu=True) == ("f16", "")  # the split path is the CPU's
    assert kv_for_drafting(asked.replace(kv_type="q4_0"), on_gpu=False) == ("q4_0", "")


def test_long_batches_are_checked_at_a_few_sizes(smollm):
    fill(smollm, 0)
    assert exact_batches.check_sizes(49) == (2, 3, 4, 5, 6, 7, 8, 9, 12, 16, 24, 32, 48, 49)
    check = check_batches(smollm, 49)
    assert check.passed and check.sizes == exact_batches.check_sizes(49)
    assert check.ratios.keys() == set(check.sizes) and check.covers(49) and not check.covers(50)
    assert smollm.kv_cells_used() == 0


def test_the_prior_reads_the_weight_types_from_the_census_the_load_cached(smollm, monkeypatch):
    """The prior runs before a fresh home's first drafted token: it takes the types from the scan
    the load cached (model_info), not from the GGUF header read again (14-15 ms there)."""
    from chatapp.engine.models import gguf_header, quant

    quant.model_info(smollm.path)  # what LocalBackend's load does

    def no_second_read(*_args, **_kwargs):
        raise AssertionError("the GGUF header was read again")

    for module in (gguf_header, quant, exact_batches):  # wherever a reader is imported by name
        monkeypatch.setattr(module, "read_header", no_second_read, raising=False)
    prior = exact_batches.prior_exact(smollm)
    assert "Q4_1" in prior and "Q8_0" in prior and "none repacked" in prior


def test_a_first_turn_drafts_on_the_prior_where_the_kernels_make_batches_exact(smollm, default_model_path):
    """A fresh home's first process: with a q8_0 cache, flash attention and Q4_1 weights (none
    repacked for batches), the turn drafts at the sizes the check will decode and says so; with an
    f16 cache nothing says the long-context rows match, and the turn decodes plainly (issue 36)."""
    assert "q8_0" in exact_batches.prior_exact(smollm) and "Q4_1" in exact_batches.prior_exact(smollm)
    drafting = LocalDrafting(smollm, threads=lambda: 7)  # a thread count no check was made on
    drafting.set("ngram", 8)
    assert cached_check(smollm, 7) is None
    turn = drafting.for_turn()
    assert turn.active and drafting.exact_at(7)
    assert drafting.record(7)["draft_check"] == "prior (checking after this turn)"
    assert drafting.policy.sizes is None  # set when the turn's decoder is made
    sampler = smollm.sampler(temperature=0.0)
    _, target = drafting.decoder(sampler, turn)
    target.close()
    sampler.close()
    assert drafting.policy.sizes == frozenset(exact_batches.check_sizes(9))
    f16 = LlamaRuntime(default_model_path, LoadOptions(n_ctx=256, flash_attn=True))
    try:
        assert exact_batches.prior_exact(f16) == ""
        plain = LocalDrafting(f16, threads=lambda: 7)
        plain.set("ngram", 8)
        assert not plain.for_turn().active and not plain.exact_at(7)
    finally:
        f16.close()
