"""Speculative decoding through the Engine, on the real default model and gemma-3-270m.

The backend gets a policy that verifies every draft it has (`AlwaysDraft`), so that drafts are
exercised on every step whatever this machine's step costs say; one test runs the cost-driven
default policy too. Every check compares a drafted turn with the same turn decoded plainly on
the same runtime, and watches llama.cpp's own cell count after every decode step.
"""

from __future__ import annotations

import pytest

from chatapp.config import Settings
from chatapp.engine.backend import Drafting, GenerationSettings
from chatapp.engine.drafting.policy import RESTORED_ACCEPTANCE, DraftPolicy
from chatapp.engine.chat.engine import Engine
from chatapp.engine.events import TextDelta, TurnDone
from chatapp.engine.local.llama import LlamaRuntime, LoadOptions
from chatapp.engine.local.backend import LocalBackend
from chatapp.engine.local.drafting import LocalDrafting
from chatapp.engine.machine.bandwidth import MEASURING
from chatapp.engine.sessions import SessionManager
from chatapp.engine.stats import DRAFT_KEYS, ROOFLINE_KEYS, draft_figures
from chatapp.errors import ConfigError
from tests.engine.drafting.always_draft import AlwaysDraft
from tests.engine.local.speculative import PROMPTS, drafting_engine, known_exact

COPY_HEAVY = ("copy", "code", "names")
GREEDY = GenerationSettings(temperature=0.0, max_tokens=96)



def checked_turn(engine: Engine, runtime: LlamaRuntime, text: str, *, fresh: bool = True):
    """One turn; after every decode step the runtime's count must be llama.cpp's cell count."""
    if fresh:
        engine.new_chat()
        engine.clear_cache()
    steps = 0
    for event in engine.send(text):
        if isinstance(event, TextDelta):
            assert runtime.n_cached == runtime.kv_cells_used() == event.live.kv_used
            steps += 1
        elif isinstance(event, TurnDone):
            assert runtime.n_cached == runtime.kv_cells_used() == event.record.kv_used
            return event, steps
    raise AssertionError("the turn did not end with TurnDone")


def both_ways(engine: Engine, runtime: LlamaRuntime, text: str):
    """The same turn decoded plainly, then drafted, on the same runtime and threads."""
    engine.set_drafting("off")
    plain, _ = checked_turn(engine, runtime, text)
    plain_cache = engine.cached_tokens()
    engine.set_drafting("ngram")
    drafted, _ = checked_turn(engine, runtime, text)
    return plain, plain_cache, drafted


@pytest.fixture(scope="module")
def smollm(default_model_path):
    # q8_0: with an f16 cache, llama.cpp's single steps past 256 cells split the attention
    # across threads and batches do not, so drafting turns itself off there (exact_batches).
    rt = LlamaRuntime(default_model_path, LoadOptions(n_ctx=1024, kv_type="q8_0"))
    yield rt
    rt.close()


@pytest.fixture(scope="module")
def gemma(gemma_path):
    rt = LlamaRuntime(gemma_path, LoadOptions(n_ctx=1024, flash_attn=True))
    yield rt
    rt.close()


@pytest.mark.parametrize("model", ["smollm", "gemma"])
def test_greedy_replies_are_the_same_with_drafts_and_without(model, request):
    runtime = request.getfixturevalue(model)
    engine = drafting_engine(runtime)
    accepted = {}
    for name, text in PROMPTS.items():
        plain, plain_cache, drafted = both_ways(engine, runtime, text)
        p, d = plain.record, drafted.record
        assert d.reply == p.reply, name
        assert (d.generated_tokens, d.finish_reason) == (p.generated_tokens, p.finish_reason), name
        # The cache ends as the plain loop leaves it: prompt and every reply token, nothing rejected.
        assert engine.cached_tokens() == plain_cache, name
        assert p.extra["draft"] == "off" and p.extra["decode_steps"] == p.decode_tokens
        assert not any(item.drafted for item in plain.view)
        if not engine.drafting.active:
            # The first drafted turn checked the batches and found them inexact here: it says so.
            assert d.extra["draft"] == "off"
            assert "differently from single steps" in d.extra["draft_off_because"] == engine.drafting.off_because
            continue
        assert d.extra["draft"] == "ngram" and d.extra["timing"] == "wall clock"
        figures = draft_figures(d)
        assert figures is not None and figures.drafted == d.extra["draft_tokens"] > 0
        assert sum(a for a, _ in figures.by_position) == figures.accepted == d.extra["draft_accepted"]
        assert d.decode_tokens == p.decode_tokens  # the same tokens went into the cache
        tinted = [item for item in drafted.view if item.drafted]
        assert all(item.origin == "generated" for item in tinted)
        assert len(tinted) <= figures.accepted
        accepted[name] = (len(tinted), figures.steps, d.decode_tokens)
    if model == "smollm":  # exact here (see exact_batches): drafting ran, and copying paid
        assert engine.drafting.active and set(accepted) == set(PROMPTS)
        assert all(accepted[name][0] > 0 for name in COPY_HEAVY), accepted
        assert sum(accepted[n][1] for n in COPY_HEAVY) < sum(accepted[n][2] for n in COPY_HEAVY), accepted


def test_the_measured_policy_gives_the_same_replies_and_its_figures_carry_across_turns(smollm):
    policy = DraftPolicy()
    engine = drafting_engine(smollm, policy=policy)
    for name in ("copy", "chat"):
        plain, plain_cache, drafted = both_ways(engine, smollm, PROMPTS[name])
        assert drafted.record.reply == plain.record.reply
        assert engine.cached_tokens() == plain_cache
    assert policy.t1_ms is not None and policy.acceptance  # measured by the turns, kept for the next
    # ... and by the next process: a new backend's first drafted turn starts from them (on disk)
    later = LocalDrafting(smollm, DraftPolicy())
    state = later.set("ngram", 8)
    sampler = smollm.sampler(temperature=0.0)
    _decoder, target = later.decoder(sampler, state)
    target.close()
    sampler.close()
    # (what earlier replies copied is capped: it does not make the next reply certain to)
    assert later.policy.acceptance == pytest.approx(
        {b: min(a, RESTORED_ACCEPTANCE) for b, a in policy.acceptance.items()}, abs=1e-4)
    assert later.policy.ratios.keys() >= policy.ratios.keys() and later.policy.t1_ms is None


@pytest.mark.unmeasured_machine  # a first run: the machine is not measured yet
def test_a_turn_says_what_it_read_per_token_against_the_bandwidth(smollm):
    engine = drafting_engine(smollm)
    first, _ = checked_turn(engine, smollm, PROMPTS["question"])
    # A fresh cache folder: the first turn does not wait for the probe, which runs after it.
    assert first.record.extra["memory_bandwidth_gbps"] is None
    assert first.record.extra["memory_bandwidth_note"] == MEASURING
    done, _ = checked_turn(engine, smollm, PROMPTS["question"])
    record = done.record
    assert set(DRAFT_KEYS) | set(ROOFLINE_KEYS) <= set(record.extra) and "memory_bandwidth_note" not in record.extra
    info = engine._backend._facts  # the GGUF facts the backend counts with
    mean_fill = (record.prompt_tokens + record.kv_used) // 2
    # 30 layers x (K + V) x 192 values x 34 bytes per 32 in q8_0 blocks (f16 would be 23,040)
    assert record.extra["decode_bytes_per_token"] == info.decode_weight_bytes + mean_fill * 12240
    assert record.extra["memory_bandwidth_gbps"] > 0
    assert record.extra["decode_gbps"] == pytest.approx(
        record.extra["decode_bytes_per_token"] * record.decode_tps / 1e9, abs=0.01)
    assert record.extra["prefill_flops_per_token"] == 2 * info.active_params


def test_stop_in_the_middle_of_a_drafted_step_ends_cleanly(smollm):
    engine = drafting_engine(smollm, max_tokens=200)
    engine.set_drafting("off")
    full, _ = checked_turn(engine, smollm, PROMPTS["copy"])
    engine.set_drafting("ngram")
    engine.new_chat()
    engine.clear_cache()
    stopped_at, record = None, None
    for event in engine.send(PROMPTS["copy"]):
        if isinstance(event, TextDelta):
            assert smollm.n_cached == smollm.kv_cells_used()
            draft = event.live.draft
            if stopped_at is None and draft is not None and draft.accepted > 0:
                # The first text of a step that accepted drafts: its other tokens are still to come.
                stopped_at = event.live.decode_tokens
                engine.stop()
        elif isinstance(event, TurnDone):
            record = event.record
    assert stopped_at is not None, "no step accepted a draft"
    assert record.finish_reason == "stopped"
    assert full.record.reply.startswith(record.reply) and len(record.reply) < len(full.record.reply)
    # The step's tokens all came out, and the cache holds the prompt and every one of them.
    assert record.decode_tokens == stopped_at
    assert record.kv_used == smollm.kv_cells_used() == record.prompt_tokens + record.generated_tokens
    # The conversation goes on from there.
    after, _ = checked_turn(engine, smollm, "Thank you.", fresh=False)
    assert after.record.cached_tokens > record.prompt_tokens


def test_a_context_filled_in_the_middle_of_a_drafted_step_ends_cleanly(default_model_path):
    runtime = LlamaRuntime(default_model_path, LoadOptions(n_ctx=256, flash_attn=True))
    try:
        engine = drafting_engine(runtime, max_tokens=1000)
        plain, plain_cache, drafted = both_ways(engine, runtime, "Count from 1 to 100, separated by commas.")
        p, d = plain.record, drafted.record
        assert p.finish_reason == d.finish_reason == "context"
        assert d.reply == p.reply and d.generated_tokens == p.generated_tokens
        assert d.kv_used == runtime.kv_cells_used() == runtime.n_ctx == runtime.n_cached
        assert engine.cached_tokens() == plain_cache
        assert d.extra["draft_accepted"] > 0
    finally:
        runtime.close()


def test_a_session_saved_after_drafted_turns_resumes_exactly(default_model_path, tmp_path):
    settings = Settings(n_ctx=1024, temperature=0.0, max_tokens=64, system_prompt="", draft="ngram", kv_type="q8_0")

    def open_drafting() -> tuple[Engine, LlamaRuntime]:
        runtime = LlamaRuntime(default_model_path, LoadOptions(n_ctx=1024, kv_type="q8_0"))
        known_exact(runtime)
        engine = Engine(LocalBackend(runtime, draft_policy=AlwaysDraft(k_max=8)), settings)
        return engine, runtime

    engine, runtime = open_drafting()
    try:
        manager = SessionManager.open(settings, tmp_path / "sessions")
        live = manager.resume("spec", engine)
        first, _ = checked_turn(engine, runtime, PROMPTS["copy"], fresh=False)
        assert first.record.extra["draft_accepted"] > 0
        report = live.save_turn(first.record)
        assert report.notices == [] and report.state_tokens == runtime.kv_cells_used()
        continued, _ = checked_turn(engine, runtime, PROMPTS["names"], fresh=False)
    finally:
        engine.close()
    engine, runtime = open_drafting()
    try:
        live = SessionManager.open(settings, tmp_path / "sessions").resume("spec", engine)
        assert live.report.fallback is None and live.report.restored_tokens > 0
        resumed, _ = checked_turn(engine, runtime, PROMPTS["names"], fresh=False)
        record = live.annotate(resumed.record)
        assert record.restored_tokens == live.report.restored_tokens == record.cached_tokens
        assert record.reply == continued.record.reply
        assert record.extra["draft_accepted"] == continued.record.extra["draft_accepted"]
    finally:
        engine.close()


def test_drafting_follows_the_setting_and_says_why_when_it_cannot_run(default_model_path):
    runtime = LlamaRuntime(default_model_path, LoadOptions(n_ctx=256, flash_attn=False))
    try:
        engine = Engine(LocalBackend(runtime), Settings(n_ctx=256, system_prompt="", draft="ngram", draft_max=4))
        state = engine.drafting
        assert state.mode == "ngram" and not state.active and "flash attention is off" in state.off_because
        assert engine.load_notices == [state.describe()]
        engine.generation = GenerationSettings(temperature=0.0, max_tokens=8)
        record = list(engine.send("Hi"))[-1].record
        assert record.extra["draft"] == "off"
        assert engine.set_drafting("off") == Drafting("off", 4) and engine.drafting.describe() == "drafting off"
        with pytest.raises(ConfigError, match="draft_max must be 1 to 64, got 0"):
            engine.set_drafting("ngram", 0)
        with pytest.raises(ConfigError, match="draft must be one of ngram, off, got 'eagle'"):
            engine.set_drafting("eagle")  # type: ignore[arg-type]
        assert engine.drafting == Drafting("off", 4)  # a refused change changes nothing
    finally:
        runtime.close()


def test_drafting_on_describes_itself(smollm):
    engine = Engine(LocalBackend(smollm), Settings(n_ctx=smollm.n_ctx, draft="ngram", draft_max=5))
    assert engine.drafting.active and engine.load_notices == []
    assert engine.drafting.describe() == "drafting on: prompt lookup, up to 5 tokens a step"
    assert engine.set_drafting("ngram", 1).describe() == "drafting on: prompt lookup, up to 1 token a step"
