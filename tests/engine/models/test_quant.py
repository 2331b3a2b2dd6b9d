"""Model inspection from the GGUF header: facts about the real model, the cache, and a
cross-check of the fast header reader against gguf's own GGUFReader."""

from __future__ import annotations

import os
from dataclasses import asdict
from pathlib import Path

import gguf
import numpy as np
import pytest

from chatapp.engine.models import quant
from chatapp.engine.models.gguf_header import ArraySummary, read_header, tensor_nbytes
from chatapp.engine.models.quant import kv_bytes_per_token, model_info
from chatapp.errors import ConfigError


def test_real_model_facts(default_model_path):
    info = model_info(default_model_path)
    assert (info.architecture, info.file_type) == ("llama", "Q4_1")
    assert info.n_params == 134_515_008
    assert (info.n_layer, info.n_embd, info.n_head, info.n_head_kv) == (30, 576, 9, 3)
    assert (info.key_length, info.value_length, info.context_length) == (64, 64, 8192)
    assert info.sliding_window is None
    assert info.vocab_size == 49152
    assert info.file_size == default_model_path.stat().st_size
    assert info.tensor_mix["Q4_1"].count == 210
    assert info.tensor_mix["Q8_0"].example == "token_embd.weight"
    assert set(info.tensor_mix) == {"Q4_1", "Q8_0", "F32"}
    assert info.weight_bytes == sum(s.bytes for s in info.tensor_mix.values())
    assert info.bits_per_weight == pytest.approx(info.weight_bytes * 8 / info.n_params)
    assert 5.5 < info.bits_per_weight < 6  # Q4_1 is 5 bits; the Q8_0 embeddings pull it up


def test_kv_bytes_per_token(default_model_path):
    info = model_info(default_model_path)
    # 30 layers x 3 KV heads x (64 + 64) elements
    assert kv_bytes_per_token(info, "f16") == 30 * 3 * 128 * 2
    assert kv_bytes_per_token(info, "q8_0") == 30 * 3 * 128 * 34 // 32
    assert kv_bytes_per_token(info, "q4_0") == 30 * 3 * 128 * 18 // 32
    with pytest.raises(ConfigError):
        kv_bytes_per_token(info, "q2_k")


def test_second_call_comes_from_the_cache(default_model_path, monkeypatch):
    first = model_info(default_model_path)
    monkeypatch.setattr(quant, "read_header", lambda path: pytest.fail("rescanned a cached file"))
    assert model_info(default_model_path) == first


@pytest.mark.parametrize("change", [
    {"weight_bytes": None}, {"tensor_mix": [1, 2]}, {"context_length": "x"}, {"n_layer": True},
    {"sliding_window": "512"}, {"bits_per_weight": float("nan")}, {"file_size": -1}, {"extra": 1},
    {"tensor_mix": {"Q4_1": {"count": "many"}}}, {"tensor_mix": {"Q4_1": [1, 2, 3, "x"]}},
])
def test_a_cache_entry_of_other_types_is_built_again_and_rewritten(default_model_path, change):
    first = model_info(default_model_path)
    cache = quant.info_cache()
    entry = cache.get(default_model_path)
    entry["info"].update(change)
    assert cache.put(default_model_path, entry)
    assert model_info(default_model_path) == first
    assert cache.get(default_model_path)["info"] == asdict(first)  # the entry is whole again


def test_changed_file_is_rescanned(tmp_path):
    path = write_toy_gguf(tmp_path / "toy.gguf", n_ctx=128)
    assert model_info(path).context_length == 128
    write_toy_gguf(path, n_ctx=256)
    os.utime(path, ns=(1, 1))
    assert model_info(path).context_length == 256


def test_fast_reader_agrees_with_gguf_reader(default_model_path):
    """Slow (GGUFReader parses every tokenizer string); this is the reference."""
    assert_agrees_with_gguf_reader(default_model_path)


@pytest.mark.parametrize("endian", [gguf.GGUFEndian.LITTLE, gguf.GGUFEndian.BIG])
def test_toy_model_with_per_layer_kv_heads(tmp_path, endian):
    path = write_toy_gguf(tmp_path / "toy.gguf", endian=endian)
    info = model_info(path)
    assert (info.architecture, info.file_type, info.n_layer, info.n_head) == ("llama", "F32", 2, 2)
    assert info.n_head_kv == 2 and info.key_length == 4  # 8 / 2 heads
    assert info.kv_elements_per_token == (1 + 2) * (4 + 4)
    assert info.vocab_size == 100
    assert {k: v.count for k, v in info.tensor_mix.items()} == {"F32": 1, "F16": 1}
    assert info.n_params == 32 + 16
    assert_agrees_with_gguf_reader(path)


def write_toy_gguf(path: Path, n_ctx: int = 128, endian=gguf.GGUFEndian.LITTLE) -> Path:
    writer = gguf.GGUFWriter(path, "llama", endianess=endian)
    writer.add_block_count(2)
    writer.add_context_length(n_ctx)
    writer.add_embedding_length(8)
    writer.add_head_count(2)
    writer.add_head_count_kv([1, 2])
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    writer.add_token_list([f"tok{i}" for i in range(100)])
    writer.add_array("toy.floats", [0.5] * 80)
    writer.add_tensor("a.weight", np.arange(32, dtype=np.float32).reshape(4, 8))
    writer.add_tensor("b.weight", np.ones(16, dtype=np.float16))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def assert_agrees_with_gguf_reader(path: Path) -> None:
    reference = gguf.GGUFReader(path)
    header = read_header(path)
    assert header.data_offset == reference.data_offset
    for key, field in reference.fields.items():
        if key.startswith("GGUF."):
            continue
        ours = header.metadata[key]
        if isinstance(ours, ArraySummary):
            assert ours.length == len(field.data), key
        elif isinstance(ours, float):
            assert ours == pytest.approx(float(field.contents()), rel=1e-6), key
        else:
            assert ours == field.contents(), key
    assert len(header.metadata) == len(reference.fields) - 3  # GGUFReader adds version and counts
    theirs = [(t.name, tuple(int(d) for d in t.shape), int(t.tensor_type), t.data_offset - reference.data_offset,
               int(t.n_bytes)) for t in reference.tensors]
    ours = [(t.name, t.shape, t.ggml_type, t.offset, tensor_nbytes(t)) for t in header.tensors]
    assert ours == theirs
