"""Switching presets in an open chat on the real model: a switch of samplers only keeps the KV
cache (the next turn prefills 0 cached tokens again), and a new system prompt's re-prefill is
predicted before the switch and measured as predicted on the next turn."""

from __future__ import annotations

import pytest

from chatapp.config import Settings
from chatapp.engine.chat import preset_switch
from chatapp.engine.chat.engine import Engine
from chatapp.engine.local.backend import LocalBackend
from chatapp.engine.local.llama import LlamaRuntime, LoadOptions
from chatapp.presets import parse_preset

THREADS = 1
BASE = Settings(n_ctx=1024, temperature=0.0, max_tokens=12, threads=THREADS,
                system_prompt="You are a concise assistant.")


@pytest.fixture(scope="module")
def runtime(default_model_path):
    rt = LlamaRuntime(default_model_path, LoadOptions(n_ctx=BASE.n_ctx, n_threads=THREADS))
    yield rt
    rt.close()


@pytest.fixture
def engine(runtime):
    engine = Engine(LocalBackend(runtime), BASE)
    engine.clear_cache()  # each test starts from an empty cache on the shared runtime
    return engine


def turn(events):
    return list(events)[-1].record


def measured_reprefill(held: int, record) -> int:
    """Of the branch's tokens the cache held before the turn, those the turn prefilled again."""
    return max(0, held - record.cached_tokens)


def test_a_sampler_only_preset_switch_prefills_no_cached_token_again(engine):
    turn(engine.send("Name a fruit."))
    turn(engine.send("Name a colour."))
    preset = parse_preset("warm", {"temperature": 0.9, "top_k": 20, "top_p": 0.8, "min_p": 0.1, "seed": 7}, "test")
    wanted = preset.apply(engine.settings)
    planned = preset_switch.plan(engine, wanted)
    assert set(planned.samplers) == {"temperature", "top_k", "top_p", "min_p", "seed"}
    assert not planned.live and not planned.later and planned.held > 20
    assert planned.reprefill == 0 and "KV cache is kept" in planned.notice()
    preset_switch.switch(engine, wanted)
    assert (engine.generation.temperature, engine.generation.top_k, engine.generation.seed) == (0.9, 20, 7)
    record = turn(engine.send("Name a planet."))
    assert measured_reprefill(planned.held, record) == 0
    assert record.prefill_tokens == record.prompt_tokens - record.cached_tokens
    assert record.prefill_tokens < record.prompt_tokens - planned.held + 1  # the question (and its glue) only


def test_a_system_prompt_switch_says_its_reprefill_before_and_measures_as_said(engine):
    turn(engine.send("Name a fruit."))
    turn(engine.send("Name a colour."))
    wanted = parse_preset("pirate", {"system_prompt": "You are a pirate. Answer briefly."}, "test").apply(
        engine.settings)
    planned = preset_switch.plan(engine, wanted)
    assert planned.live == {"system_prompt": "You are a pirate. Answer briefly."} and not planned.samplers
    assert 0 < planned.reprefill <= planned.held
    assert f"prefills {planned.reprefill:,} cached tokens again" in planned.notice()
    preset_switch.switch(engine, wanted)
    assert engine.system_prompt == "You are a pirate. Answer briefly."
    record = turn(engine.send("Name a planet."))
    assert measured_reprefill(planned.held, record) == planned.reprefill
    assert record.cached_tokens == planned.kept


def test_a_switch_names_what_only_a_reload_changes_and_leaves_it(engine):
    wanted = parse_preset("big", {"n_ctx": 2048, "kv_type": "q8_0", "temperature": 0.3, "think_budget": 64},
                          "test").apply(engine.settings)
    done = preset_switch.switch(engine, wanted)
    assert set(done.later) == {"n_ctx", "kv_type"} and "take effect when the model loads again" in done.notice()
    assert done.live == {"think_budget": 64} and engine.thinking.mode == "64"
    assert engine.settings.n_ctx == BASE.n_ctx and engine.settings.kv_type == BASE.kv_type
    assert engine.generation.temperature == 0.3 and engine.settings.temperature == 0.3
