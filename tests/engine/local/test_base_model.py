"""Base models (issue 59): named as such by one decision, and asked in the fallback format,
whose reply stops where the model opens the next turn instead of writing a dialogue."""

import pytest

from chatapp.engine.backend import GenerationSettings
from chatapp.engine.local.llama import LlamaRuntime, LoadOptions
from chatapp.engine.local.stop_text import StopText
from chatapp.engine.models.base_model import FALLBACK_STOPS, NO_TEMPLATE, NOT_CHAT_TUNED, base_model_reason

from tests.engine.conftest import make_engine
from tests.gguf_copy import copies_with_templates

LONG = GenerationSettings(temperature=0.0, max_tokens=200)


@pytest.fixture(scope="module")
def templateless(default_model_path, tmp_path_factory):
    """The default model with its chat template removed."""
    target = tmp_path_factory.mktemp("templateless") / "SmolLM2-no-template.gguf"
    copies_with_templates(default_model_path, {target: None})
    return target


def test_the_one_decision(default_model_path, gemma_path, templateless):
    assert base_model_reason(default_model_path) is None
    assert base_model_reason(gemma_path) == NOT_CHAT_TUNED  # the catalog's chat = false
    assert base_model_reason(templateless) == NO_TEMPLATE
    assert base_model_reason(chat=False) == NOT_CHAT_TUNED
    assert base_model_reason(template="") == NO_TEMPLATE
    assert base_model_reason(template="{{ messages }}") is None


def _reply(path, question):
    rt = LlamaRuntime(path, LoadOptions(n_ctx=1024))
    try:
        events = list(make_engine(rt, "", LONG).send(question))
    finally:
        rt.close()
    return events[-1].record


@pytest.mark.parametrize("which", ["gemma", "templateless"])
def test_a_base_model_answers_once(which, request, gemma_path, templateless):
    path = gemma_path if which == "gemma" else templateless
    record = _reply(path, "What is the capital of France?")
    assert not any(stop.strip() in record.reply for stop in FALLBACK_STOPS), record.reply
    assert record.finish_reason == "stop"
    assert record.generated_tokens < LONG.max_tokens


def test_without_the_stop_the_model_would_write_the_next_turn(gemma_path, monkeypatch):
    """The control: with no stop strings, the same greedy reply goes on into a `user:` turn."""
    import chatapp.engine.local.backend as backend

    monkeypatch.setattr(backend, "FALLBACK_STOPS", ())
    record = _reply(gemma_path, "What is the capital of France?")
    assert any(stop in record.reply for stop in FALLBACK_STOPS), record.reply


def test_stop_text_holds_back_only_what_may_start_a_stop():
    stops = StopText(("\nuser:",))
    shown = [stops.feed(piece) for piece in ["Paris", ".\n", "\nus", "er: and", " more"]]
    assert "".join(shown) == "Paris.\n" and stops.stopped
    other = StopText(("\nuser:",))
    assert other.feed("a\nus") == "a" and other.feed("ual") == "\nusual" and other.flush() == ""
