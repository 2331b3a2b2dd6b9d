"""Images through libmtmd on the real default model and a synthetic projector: each image is
encoded once, and its cells come back from a kept state (a branch, a resume) with no encode."""

from __future__ import annotations

from pathlib import Path

import pytest
from llama_cpp import mtmd_cpp

from chatapp.engine.local.llama import LlamaRuntime, LoadOptions
from chatapp.engine.local.llama.mtmd import Projector
from chatapp.engine.models.projector import find_projector, projector_info
from chatapp.errors import AttachmentError, ModelError
from tests.engine.local.vision import build_projector, feed, picture, prompt_ids

USER = "<|im_start|>user\n"
ASK = "What is in this picture?<|im_end|>\n<|im_start|>assistant\n"


@pytest.fixture(scope="session")
def mmproj(tmp_path_factory) -> Path:
    return build_projector(tmp_path_factory.mktemp("mmproj") / "mmproj-test.gguf")


@pytest.fixture
def runtime(default_model_path):
    rt = LlamaRuntime(default_model_path, LoadOptions(n_ctx=1024, n_threads=1, n_threads_batch=1))
    yield rt
    rt.close()


def reply(rt: LlamaRuntime, n: int = 12) -> list[int]:
    sampler = rt.sampler(temperature=0.8, seed=7)
    out = []
    for _ in range(n):
        token = sampler.sample()
        out.append(token)
        rt.decode_one(token)
    sampler.close()
    return out


def test_libmtmd_loads_the_synthetic_projector(runtime, mmproj):
    projector = Projector(runtime, mmproj)
    assert projector.vision and not projector.audio
    info = projector.info
    assert (info.projector_type, info.n_embd, info.image_token_budget) == ("mlp", 576, 16)


def test_image_tokens_are_libmtmds_count_and_fill_that_many_cells(runtime, mmproj):
    projector = Projector(runtime, mmproj)
    cells = projector.image(picture(1), "a.png")
    assert (cells.width, cells.height) == (40, 48)
    assert cells.n_tokens == mtmd_cpp.mtmd_helper_get_n_tokens(projector._chunks[cells.sha256])
    assert cells.n_tokens == cells.nx * cells.ny == projector.info.image_token_budget
    runtime.eval(runtime.tokenize(USER, special=True))
    before = runtime.kv_cells_used()
    projector.decode(cells)
    assert runtime.kv_cells_used() - before == len(cells.ids) == cells.n_tokens


def test_turn_two_encodes_nothing_and_prefills_only_the_new_text(runtime, mmproj):
    projector = Projector(runtime, mmproj)
    turn1 = [USER, projector.image(picture(1)), ASK]
    feed(projector, turn1)
    reply(runtime)
    assert projector.encodes == 1
    new_text = "Noise.<|im_end|>\n<|im_start|>user\nAnd its colours?<|im_end|>\n<|im_start|>assistant\n"
    kept = feed(projector, turn1 + [new_text])
    assert projector.encodes == 1
    assert kept == len(prompt_ids(runtime, turn1))
    assert runtime.n_cached - kept == len(runtime.tokenize(new_text, special=True))


def test_branch_switch_edit_below_and_resume_restore_the_image_without_encoding(runtime, mmproj,
                                                                              default_model_path):
    projector = Projector(runtime, mmproj)
    image = projector.image(picture(2))
    branch_a = [USER, image, ASK]
    feed(projector, branch_a)
    state, tokens = bytes(runtime.seq_state()), runtime.kv_tokens
    feed(projector, [USER, image, "Describe it in one word.<|im_end|>\n<|im_start|>assistant\n"])  # edit below
    assert projector.encodes == 1
    assert runtime.restore_seq_state(state, tokens)  # switch back to branch A's leaf
    assert feed(projector, branch_a) == len(tokens) - 1 and projector.encodes == 1  # the last token runs for its logits
    expected = reply(runtime)

    resumed = LlamaRuntime(default_model_path, LoadOptions(n_ctx=1024, n_threads=1, n_threads_batch=1))
    again = Projector(resumed, mmproj)
    again.embeddings = lambda cells: pytest.fail("a resume re-encoded the image")
    assert resumed.restore_seq_state(state, tokens)
    assert feed(again, [USER, again.image(picture(2)), ASK]) == len(tokens) - 1
    assert again.encodes == 0
    assert reply(resumed) == expected
    resumed.close()


def test_cells_restored_equal_cells_encoded_and_replies_match_encoding_from_scratch(runtime, mmproj,
                                                                                   default_model_path):
    projector = Projector(runtime, mmproj)
    parts = [USER, projector.image(picture(3)), ASK]
    feed(projector, parts)
    state, tokens = bytes(runtime.seq_state()), runtime.kv_tokens

    scratch = LlamaRuntime(default_model_path, LoadOptions(n_ctx=1024, n_threads=1, n_threads_batch=1))
    fresh = Projector(scratch, mmproj)
    feed(fresh, [USER, fresh.image(picture(3)), ASK])
    assert fresh.encodes == 1
    assert bytes(scratch.seq_state()) == state
    from_scratch = reply(scratch)
    scratch.close()

    runtime.clear_kv()
    assert runtime.restore_seq_state(state, tokens)
    assert bytes(runtime.seq_state()) == state
    assert reply(runtime) == from_scratch


def test_a_different_image_is_not_taken_for_a_cached_one(runtime, mmproj):
    projector = Projector(runtime, mmproj)
    feed(projector, [USER, projector.image(picture(4)), ASK])
    kept = feed(projector, [USER, projector.image(picture(5)), ASK])
    assert projector.encodes == 2
    assert kept == len(runtime.tokenize(USER, special=True))


def test_an_edit_above_the_image_decodes_it_again_from_its_kept_embeddings(runtime, mmproj):
    projector = Projector(runtime, mmproj)
    image = projector.image(picture(6))
    feed(projector, [USER, image, ASK])
    cells_before = bytes(runtime.seq_state())
    kept = feed(projector, ["<|im_start|>system\nBe brief.<|im_end|>\n" + USER, image, ASK])
    assert kept < len(runtime.tokenize(USER, special=True))
    assert projector.encodes == 1  # the image's cells moved, so they are decoded again; its encoding is kept
    assert bytes(runtime.seq_state()) != cells_before


def test_bad_images_get_one_line(runtime, mmproj):
    projector = Projector(runtime, mmproj)
    with pytest.raises(AttachmentError, match="notes.txt is not an image"):
        projector.image(b"plain text, not pixels\n", "notes.txt")
    with pytest.raises(AttachmentError, match="cut short"):
        projector.image(picture(7)[:80], "half.png")
    assert projector.encodes == 0


def test_a_projector_for_another_model_says_so(runtime, tmp_path):
    other = build_projector(tmp_path / "mmproj-other.gguf", n_embd=512)
    assert projector_info(other).n_embd == 512
    with pytest.raises(ModelError, match="projects into 512-wide embeddings but .* uses 576: it is the projector "
                                         "of another model"):
        Projector(runtime, other)


def test_a_gguf_that_is_no_projector_says_so(default_model_path):
    with pytest.raises(ModelError, match="is not an mmproj"):
        projector_info(default_model_path)


def test_the_projector_beside_the_model_is_found(tmp_path):
    model = tmp_path / "SmolVLM-256M-Instruct-Q8_0.gguf"
    model.write_bytes(b"")
    assert find_projector(model) is None
    (tmp_path / "mmproj-SmolVLM-256M-Instruct-f16.gguf").write_bytes(b"")
    assert find_projector(model) == tmp_path / "mmproj-SmolVLM-256M-Instruct-f16.gguf"
    (tmp_path / "mmproj-other-f16.gguf").write_bytes(b"")
    assert find_projector(model) == tmp_path / "mmproj-SmolVLM-256M-Instruct-f16.gguf"
