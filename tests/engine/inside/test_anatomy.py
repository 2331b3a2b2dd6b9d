"""The model's anatomy from its GGUF header: both catalog models, checked against llama.cpp's own
cache, and a synthetic mixture-of-experts file for the expert lines."""

from __future__ import annotations

import numpy as np
import pytest
from gguf import GGUFWriter

from chatapp.engine.inside.anatomy import FAMILIES, anatomy, family_of, tensor_kind
from chatapp.engine.inside.anatomy_view import sections
from chatapp.engine.inside.consistency import InconsistentHeader
from chatapp.engine.local.llama import LlamaRuntime, LoadOptions
from chatapp.engine.models.quant import kv_bytes_per_token, model_info
from chatapp.errors import ConfigError
from tests.gguf_copy import write_absurd_header

CELL_META_BYTES = 12
"""What llama.cpp's sequence state adds per cached token besides K and V, in each of its caches:
the position, the number of sequences and the sequence id, 4 bytes each (state_write_meta)."""


def test_default_model_figures(default_model_path):
    a = anatomy(default_model_path)
    assert (a.arch, a.n_vocab, a.n_embd, a.n_layer, a.n_head, a.n_head_kv) == ("llama", 49152, 576, 30, 9, 3)
    assert (a.gqa_ratio, a.head_dim, a.value_dim, a.n_ff, a.rope_base) == (3.0, 64, 64, 1536, 100000.0)
    assert (a.expert_count, a.expert_used_count, a.sliding_window) == (0, 0, None)
    assert a.embedding.name == "token_embd.weight" and a.embedding.shape == (576, 49152)
    assert a.embedding.type == "Q8_0" and a.embedding.bytes == 49152 * 576 // 32 * 34
    assert a.output is None and a.output_tied
    info = model_info(default_model_path)
    assert a.params_total == a.params_active == info.n_params == 134_515_008
    assert sum(t.params for t in a.families.values()) == a.params_total
    assert sum(t.bytes for t in a.families.values()) == a.weight_bytes == info.weight_bytes
    assert set(a.families) == {"embedding", "attention", "ffn", "norms"}
    assert a.families["attention"].tensors == 4 * 30 and a.families["ffn"].tensors == 3 * 30
    assert len(a.blocks) == 30 and len({b.bytes for b in a.blocks}) == 1
    assert sum(b.params for b in a.blocks) == a.params_total - a.embedding.params - 576  # less output_norm
    assert a.kv.bytes_per_token == 2 * 30 * 3 * 64 * 2 == kv_bytes_per_token(info, "f16")
    assert any("n_embd / n_head = 576 / 9 = 64" in step for step in a.kv.steps)


def test_gemma_figures(gemma_path):
    a = anatomy(gemma_path)
    assert (a.arch, a.n_vocab, a.n_embd, a.n_layer, a.n_head, a.n_head_kv) == ("gemma3", 262144, 640, 18, 4, 1)
    assert (a.gqa_ratio, a.head_dim, a.value_dim, a.n_ff, a.sliding_window) == (4.0, 256, 256, 2048, 512)
    assert a.rope_base == 1_000_000.0 and a.output_tied and a.expert_count == 0
    assert a.params_total == a.params_active == model_info(gemma_path).n_params
    # Q4_K_M mixes quant types between blocks, so the blocks differ in bytes but not in parameters.
    assert len({b.params for b in a.blocks}) == 1 and len({b.bytes for b in a.blocks}) > 1
    assert a.kv.bytes_per_token == 2 * 18 * 1 * 256 * 2
    assert any("which layers use the sliding window is not in the file" in note for note in a.notes)


@pytest.mark.parametrize("kv_type", ["f16", "q8_0"])
@pytest.mark.parametrize("which", ["default", "gemma"])
def test_kv_bytes_per_token_match_what_llama_cpp_stores(which, kv_type, request):
    """The derived figure against llama.cpp's own: how much a sequence's saved state grows per token."""
    path = request.getfixturevalue("default_model_path" if which == "default" else "gemma_path")
    a = anatomy(path, kv_type)
    runtime = LlamaRuntime(path, LoadOptions(n_ctx=256, kv_type=kv_type))
    try:
        ids = runtime.tokenize("The quick brown fox jumps over the lazy dog. " * 4, special=False, add_bos=True)
        runtime.eval(ids[:8])
        before = len(runtime.seq_state())
        runtime.eval(ids[8:32])
        grown = (len(runtime.seq_state()) - before) / 24
    finally:
        runtime.close()
    caches = 2 if a.sliding_window else 1  # llama.cpp keeps sliding-window layers in a cache of their own
    assert grown - caches * CELL_META_BYTES == a.kv.bytes_per_token


def test_kv_type_is_checked(default_model_path):
    with pytest.raises(ConfigError):
        anatomy(default_model_path, "q3")


@pytest.fixture
def synthetic_moe(tmp_path):
    """SYNTHETIC: a tiny mixture-of-experts GGUF written here with the gguf package; not a real
    model. 2 blocks, 8 experts of which 2 run per token, one shared expert, an untied output head."""
    n_vocab, n_embd, n_ff_exp, n_expert = 40, 32, 16, 8
    path = tmp_path / "synthetic-moe.gguf"
    writer = GGUFWriter(path, "qwen2moe")
    writer.add_name("synthetic moe (test only)")
    writer.add_block_count(2)
    writer.add_context_length(128)
    writer.add_embedding_length(n_embd)
    writer.add_head_count(4)
    writer.add_head_count_kv(2)
    writer.add_key_length(8)
    writer.add_value_length(8)
    writer.add_expert_count(n_expert)
    writer.add_expert_used_count(2)
    writer.add_expert_feed_forward_length(n_ff_exp)
    writer.add_expert_shared_count(1)
    writer.add_token_list([f"t{i}" for i in range(n_vocab)])

    def tensor(name, *shape):
        writer.add_tensor(name, np.zeros(shape, dtype=np.float32))

    tensor("token_embd.weight", n_vocab, n_embd)
    tensor("output.weight", n_vocab, n_embd)
    tensor("output_norm.weight", n_embd)
    for b in range(2):
        tensor(f"blk.{b}.attn_norm.weight", n_embd)
        tensor(f"blk.{b}.attn_q.weight", 4 * 8, n_embd)
        tensor(f"blk.{b}.attn_k.weight", 2 * 8, n_embd)
        tensor(f"blk.{b}.attn_v.weight", 2 * 8, n_embd)
        tensor(f"blk.{b}.attn_output.weight", n_embd, 4 * 8)
        tensor(f"blk.{b}.ffn_norm.weight", n_embd)
        tensor(f"blk.{b}.ffn_gate_inp.weight", n_expert, n_embd)
        for part in ("gate", "up"):
            tensor(f"blk.{b}.ffn_{part}_exps.weight", n_expert, n_ff_exp, n_embd)
            tensor(f"blk.{b}.ffn_{part}_shexp.weight", n_ff_exp, n_embd)
        tensor(f"blk.{b}.ffn_down_exps.weight", n_expert, n_embd, n_ff_exp)
        tensor(f"blk.{b}.ffn_down_shexp.weight", n_embd, n_ff_exp)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def test_synthetic_moe_counts_only_the_used_experts_as_active(synthetic_moe):
    a = anatomy(synthetic_moe)
    assert (a.arch, a.expert_count, a.expert_used_count, a.expert_shared_count, a.n_ff_expert) == (
        "qwen2moe", 8, 2, 1, 16)
    routed = 2 * 3 * 8 * 16 * 32  # blocks × (gate, up, down) × experts × n_ff_exp × n_embd
    shared = 2 * 3 * 16 * 32
    router = 2 * 8 * 32
    attention = 2 * (32 * 32 + 2 * 16 * 32 + 32 * 32)
    norms = 2 * 2 * 32 + 32
    embedding = output = 40 * 32
    assert a.params_total == routed + shared + router + attention + norms + embedding + output
    assert a.params_active == a.params_total - routed + routed * 2 // 8
    assert a.families["experts"].params == routed + shared + router
    assert a.families["attention"].params == attention and a.families["norms"].params == norms
    assert a.families["output"].params == output and not a.output_tied and a.output.shape == (32, 40)
    assert a.gqa_ratio == 2.0 and a.head_dim == 8 and a.n_vocab == 40
    assert a.kv.bytes_per_token == 2 * 2 * 2 * 8 * 2
    words = {title: dict(rows) for title, rows in ((s.title, s.rows) for s in sections(a))}
    assert words["Blocks"]["experts"] == "8, 2 used per token"
    assert "only the routed experts run" in words["Model"]["active per token"]


def test_unknown_keys_stay_unknown(tmp_path):
    """SYNTHETIC: a file with blocks but no head counts, lengths or RoPE base."""
    path = tmp_path / "bare.gguf"
    writer = GGUFWriter(path, "llama")
    writer.add_block_count(1)
    writer.add_tensor("token_embd.weight", np.zeros((10, 32), dtype=np.float32))
    writer.add_tensor("blk.0.attn_q.weight", np.zeros((32, 32), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    a = anatomy(path)
    assert (a.n_embd, a.n_head, a.n_head_kv, a.head_dim, a.gqa_ratio, a.rope_base, a.n_vocab) == (None,) * 7
    assert a.kv.bytes_per_token is None and a.kv.steps[-1].startswith("unknown")
    rows = dict(next(s for s in sections(a) if s.title == "Blocks").rows)
    assert rows["attention heads"] == "unknown query, unknown key/value" and rows["RoPE base"] == "unknown"


@pytest.mark.parametrize(("name", "family"), [
    ("token_embd.weight", "embedding"), ("output.weight", "output"), ("output_norm.weight", "norms"),
    ("blk.12.attn_k.weight", "attention"), ("blk.0.attn_q_norm.weight", "norms"),
    ("blk.3.ffn_up.weight", "ffn"), ("blk.3.ffn_gate_exps.weight", "experts"),
    ("blk.3.ffn_gate_inp.weight", "experts"), ("blk.3.ffn_up_shexp.weight", "experts"),
    ("blk.0.ssm_conv1d.weight", "other"), ("something_new.weight", "other"),
])
def test_tensor_families_follow_gguf_names(name, family):
    assert family_of(tensor_kind(name)) == family
    assert family in FAMILIES


def test_per_layer_kv_heads_are_summed(tmp_path):
    """SYNTHETIC: three blocks whose middle one has no K/V heads (as hybrid models' recurrent layers)."""
    path = tmp_path / "hybrid.gguf"
    writer = GGUFWriter(path, "llama")
    writer.add_block_count(3)
    writer.add_embedding_length(32)
    writer.add_head_count(4)
    writer.add_head_count_kv([2, 0, 2])
    writer.add_tensor("token_embd.weight", np.zeros((10, 32), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    a = anatomy(path, "q8_0")
    assert (a.n_head_kv, a.n_head_kv_per_layer, a.gqa_ratio, a.head_dim) == (2, [2, 0, 2], None, 8)
    assert a.kv.elements_per_token == 4 * (8 + 8) and a.kv.bytes_per_token == 64 // 32 * 34
    assert "K/V heads, summed over the 3 layers: 4 (2 layers have attention; attention.head_count_kv)" in a.kv.steps
    assert "heads vary by layer, so there is no single GQA ratio" in a.notes


def test_an_absurd_header_is_refused_as_inconsistent_not_shown(tmp_path):
    """10^9 blocks, negative heads, a 10 MB name: one line says what is wrong, at once (the
    per-layer K/V heads of 10^9 blocks were an 8 GB list that took minutes to build)."""
    path = write_absurd_header(tmp_path / "absurd.gguf")
    with pytest.raises(InconsistentHeader) as info:
        anatomy(path)
    message = str(info.value)
    assert message.startswith("the header is inconsistent, so its figures are not shown: ")
    for problem in ("general.name is 10,000,000 characters long", "llama.attention.head_count is negative (-4)",
                    "llama.attention.head_count_kv is negative (-4)",
                    "llama.block_count is 1,000,000,000 (llama.cpp loads at most 512)"):
        assert problem in message
    assert len(message) < 500 and "\n" not in message


@pytest.mark.parametrize(("keys", "problem"), [
    ({"block_count": 30}, None),
    ({"block_count": 1}, "the tensor table has blk.1 but llama.block_count is 1"),
    ({"block_count": 2, "head_count_kv": [2, 2, 2]}, "llama.attention.head_count_kv has 3 values for 2 blocks"),
    ({"block_count": 2, "expert_count": 2, "expert_used_count": 4}, "4 experts used per token of 2"),
    ({"block_count": 2, "head_count": 2, "head_count_kv": 8}, "8 K/V heads for 2 query heads"),
])
def test_figures_that_contradict_each_other_are_named(tmp_path, keys, problem):
    """SYNTHETIC: two blocks in the tensor table, and header keys that agree with them or not."""
    path = tmp_path / "two-blocks.gguf"
    writer = GGUFWriter(path, "llama")
    writer.add_embedding_length(32)
    for key, value in keys.items():
        getattr(writer, f"add_{key}")(value)
    writer.add_tensor("token_embd.weight", np.zeros((10, 32), dtype=np.float32))
    for b in range(2):
        writer.add_tensor(f"blk.{b}.attn_q.weight", np.zeros((32, 32), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    if problem is None:
        assert anatomy(path).n_layer == 30
        return
    with pytest.raises(InconsistentHeader, match=problem):
        anatomy(path)
