"""A chat about an image (issue 55) on the real default model and a synthetic projector
(tests.engine.local.vision): the image's cells come from libmtmd's chunk, it is encoded by the
first turn that needs it and never again (a next turn, a regenerate, an edit of the question
below it), each turn prefills only what is new, and the Tokens view shows its cells as "image"."""

from __future__ import annotations

from pathlib import Path

import pytest
from llama_cpp import mtmd_cpp

from chatapp.config import Settings
from chatapp.engine.backend import GenerationSettings
from chatapp.engine.chat.engine import Engine
from chatapp.engine.images import MEDIA_MARKER
from chatapp.engine.local.backend import LocalBackend
from chatapp.engine.local.llama import LlamaRuntime, LoadOptions
from chatapp.errors import AttachmentError
from tests.engine.local.vision import build_projector, picture


@pytest.fixture(scope="module")
def mmproj(tmp_path_factory) -> Path:
    return build_projector(tmp_path_factory.mktemp("mmproj") / "mmproj-test.gguf")


def open_engine(model: Path, projector: Path | None) -> Engine:
    runtime = LlamaRuntime(model, LoadOptions(n_ctx=1024, n_threads=2, n_threads_batch=2))
    engine = Engine(LocalBackend(runtime, projector=projector), Settings(n_ctx=1024))
    engine.generation = GenerationSettings(temperature=0.0, max_tokens=6)
    return engine


def record(events):
    return list(events)[-1].record


def text_only_prefill(model: Path, question: str) -> int:
    """What a second turn asking `question` prefills in a chat without an image: its question and
    the template's glue around it (the control the image chat's second turn must equal)."""
    engine = open_engine(model, None)
    try:
        record(engine.send("What is in this picture?"))
        second = record(engine.send(question))
        return second.prompt_tokens - second.cached_tokens
    finally:
        engine.close()


def test_an_image_is_encoded_once_and_each_turn_prefills_only_what_is_new(default_model_path, mmproj):
    engine = open_engine(default_model_path, mmproj)
    try:
        facts = engine.add_image(picture(3), "harbour.png")
        chunks = engine._backend._images._loaded()._chunks[facts.sha256]  # libmtmd's own count of the chunk
        assert facts.n_tokens == mtmd_cpp.mtmd_helper_get_n_tokens(chunks) == 16
        assert (facts.width, facts.height) == (40, 48)

        done = list(engine.send("What is in this picture?", images=[facts.sha256]))[-1]
        first = done.record
        assert (first.extra["images"], first.extra["image_tokens"], first.extra["image_encodes"]) == (1, 16, 1)
        assert first.extra["image_encode_ms"] > 0
        image_cells = [item for item in done.view if item.role == "image"]
        assert len(image_cells) == 16 and {item.origin for item in image_cells} == {"prefilled"}
        assert image_cells[0].token.piece == MEDIA_MARKER
        cells_end = max(i for i, item in enumerate(done.view) if item.role == "image") + 1

        question = "And what colour is it?"
        second = record(engine.send(question))
        assert second.extra["image_encodes"] == 0
        assert second.cached_tokens >= cells_end
        assert second.prompt_tokens - second.cached_tokens == text_only_prefill(default_model_path, question)

        assert record(engine.regenerate()).extra["image_encodes"] == 0
        first_question = next(m for m in engine.transcript() if m.role == "user")
        edited = record(engine.edit(first_question.id, "Describe this picture."))
        assert edited.extra["image_encodes"] == 0 and edited.cached_tokens >= cells_end  # the image is above the edit
        assert engine._backend._images._projector.encodes == 1

        engine.set_system_prompt("Answer in one word.")  # above the image: its cells move, its encoding is kept
        above = record(engine.send("What is it?"))
        image_start = next(i for i, item in enumerate(done.view) if item.role == "image")
        assert above.cached_tokens < image_start and above.extra["image_encodes"] == 0
        assert engine._backend._images._projector.encodes == 1
    finally:
        engine.close()


def test_a_restored_cache_keeps_the_image_and_the_reply_is_the_one_computed_afresh(default_model_path, mmproj):
    """The cache of a turn about an image, saved and restored into a new engine and projector (a
    resume), gives the next turn with no encode; its reply is the one the first engine gave."""
    warm = open_engine(default_model_path, mmproj)
    try:
        sha = warm.add_image(picture(5), "boat.png").sha256
        first = record(warm.send("What is in this picture?", images=[sha]))
        state, messages = warm.save_cache("s"), warm.messages
        second = record(warm.send("Is it a boat?"))
    finally:
        warm.close()
    resumed = open_engine(default_model_path, mmproj)
    try:
        assert resumed.add_image(picture(5), "boat.png").sha256 == sha  # read again: tokenized, not encoded
        resumed.load_conversation(messages)
        assert resumed.restore_cache(state, len(state.tokens))
        again = record(resumed.send("Is it a boat?"))
    finally:
        resumed.close()
    assert first.extra["image_encodes"] == 1
    assert again.extra["image_encodes"] == 0 and again.cached_tokens == second.cached_tokens
    assert again.reply == second.reply


def test_bad_images_and_a_model_without_a_projector_say_so_in_one_line(default_model_path, mmproj):
    blind = open_engine(default_model_path, None)
    try:
        with pytest.raises(AttachmentError, match="does not see images"):
            blind.add_image(picture(1), "cat.png")
    finally:
        blind.close()
    engine = open_engine(default_model_path, mmproj)
    try:
        with pytest.raises(AttachmentError, match="not an image libmtmd can read"):
            engine.add_image(b"\x89PNG\r\n\x1a\n" + b"\0" * 40, "cut.png")
        with pytest.raises(AttachmentError, match="not in this conversation"):
            engine.send("What is this?", images=["ab" * 32])
        sha = engine.add_image(picture(2), "cat.png").sha256
        with pytest.raises(AttachmentError, match="image marker"):
            engine.send(f"What does {MEDIA_MARKER} mean?", images=[sha])
        assert [m.role for m in engine.transcript()] == ["system"]  # nothing was asked
        assert record(engine.send("What is this?", images=[sha])).extra["image_encodes"] == 1
    finally:
        engine.close()
