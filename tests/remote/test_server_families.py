"""Model families over `--server` (issue 53): a real llama-server, started with --jinja on a copy
of the default model carrying one of llama.cpp's own templates (shared with the in-process family
tests, tests.conftest.family_models), chats three turns, regenerates, edits and resumes through
chatapp's server backend with no refusal, and the re-prefill predicted before turns 2 and 3 is
what they measure (±1 token). All 70 templates run in process
(tests/engine/chat/test_template_families.py); a server started for each of them would cost more
than the rest of the remote tests together, so here one template of each family users bring."""

from __future__ import annotations

import pytest

from chatapp.engine.backend import GenerationSettings
from chatapp.engine.opening import connect_engine
from chatapp.llama_tools import templates_dir

from .conftest import SETTINGS

TEMPLATES = templates_dir()  # at collection, as the other template tests take it
FAMILIES = (
    "Qwen-Qwen3-0.6B", "Qwen3.5-4B", "openai-gpt-oss-120b", "google-gemma-4-31B-it",
    "meta-llama-Llama-3.1-8B-Instruct", "mistralai-Mistral-Nemo-Instruct-2407",
    "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B", "GLM-4.7-Flash", "Kimi-K2-Instruct", "ibm-granite-granite-4.0",
)
QUESTIONS = ("What is the capital of France?", "And of Italy?", "Thanks.")


def open_over(url: str):
    engine = connect_engine(SETTINGS.replace(server=url))
    engine.generation = GenerationSettings(temperature=0.0, max_tokens=6)
    return engine


def last_record(events):
    return list(events)[-1].record


def ran(record) -> bool:
    return record.prompt_tokens > 0 and record.finish_reason in ("stop", "length")


@pytest.mark.parametrize("stem", FAMILIES)
def test_each_family_chats_predicts_its_reprefill_regenerates_edits_and_resumes_over_a_server(
        stem, family_models, another_server):
    server = another_server("--jinja", model=family_models(TEMPLATES / f"{stem}.jinja"), n_ctx=2048,
                            slot_files=False)
    engine = open_over(server.url)
    mispredicted = []
    try:
        for turn, question in enumerate(QUESTIONS):
            predicted = engine.branch_figures().reprefill
            record = last_record(engine.send(question))
            assert ran(record), (turn, record)
            if turn and abs(record.extra.get("reprefill_tokens", 0) - predicted) > 1:
                mispredicted.append((turn, predicted, record.extra))
        first_user = next(m for m in engine.transcript() if m.role == "user")
        assert ran(last_record(engine.regenerate()))
        assert ran(last_record(engine.edit(first_user.id, "What is the capital of Spain?")))
        transcript = engine.transcript()
    finally:
        engine.close()
    resumed = open_over(server.url)
    try:
        resumed.load_conversation(transcript)
        assert ran(last_record(resumed.send("One more word?")))
    finally:
        resumed.close()
    assert not mispredicted
