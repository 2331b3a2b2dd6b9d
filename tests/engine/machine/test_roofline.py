"""What a decoded token reads, from the GGUF tensor table, and the lines the Speed panel shows."""

from __future__ import annotations

import pytest
from gguf.constants import GGMLQuantizationType as T

from chatapp.engine.models.gguf_header import TensorEntry
from chatapp.engine.models.quant import kv_bytes_per_token, model_info, per_token_use
from chatapp.engine.machine.roofline import (
    bound_tps, decode_line, decode_traffic, prefill_flops_per_token, prefill_line, record_figures,
)

EMBD, VOCAB, FF = 64, 1000, 256


def tensor(name, *shape, kind=T.F32):
    return TensorEntry(name, shape, int(kind), 0)


def layer(i, experts=0):
    if experts:
        ffn = [tensor(f"blk.{i}.ffn_{part}_exps.weight", EMBD, FF, experts) for part in ("gate", "up")]
        ffn.append(tensor(f"blk.{i}.ffn_down_exps.weight", FF, EMBD, experts))
        ffn.append(tensor(f"blk.{i}.ffn_gate_inp.weight", EMBD, experts))
    else:
        ffn = [tensor(f"blk.{i}.ffn_{part}.weight", EMBD, FF) for part in ("gate", "up")]
        ffn.append(tensor(f"blk.{i}.ffn_down.weight", FF, EMBD))
    return [tensor(f"blk.{i}.attn_q.weight", EMBD, EMBD), *ffn]


def test_an_untied_embedding_reads_one_row_and_the_head_reads_all():
    tensors = [tensor("token_embd.weight", EMBD, VOCAB, kind=T.Q8_0), tensor("output.weight", EMBD, VOCAB),
               *layer(0)]
    read, params, tied = per_token_use(tensors, 0, 0)
    row = EMBD // 32 * 34  # one Q8_0 row of 64 values: two blocks of 34 bytes
    head, blk = EMBD * VOCAB * 4, (EMBD * EMBD + 3 * EMBD * FF) * 4
    assert not tied
    assert read == row + head + blk
    assert params == EMBD * VOCAB + EMBD * EMBD + 3 * EMBD * FF


def test_a_tied_embedding_is_read_whole_as_the_output_head():
    read, params, tied = per_token_use([tensor("token_embd.weight", EMBD, VOCAB), *layer(0)], 0, 0)
    assert tied
    assert read == (EMBD * VOCAB + EMBD * EMBD + 3 * EMBD * FF) * 4
    assert params == EMBD * VOCAB + EMBD * EMBD + 3 * EMBD * FF


def test_moe_reads_only_the_experts_used():
    tensors = [tensor("token_embd.weight", EMBD, VOCAB), tensor("output.weight", EMBD, VOCAB), *layer(0, experts=8)]
    read, params, _ = per_token_use(tensors, expert_count=8, expert_used=2)
    experts = 3 * EMBD * FF * 8
    dense = EMBD * VOCAB + EMBD * EMBD + EMBD * 8  # head, attention, router
    assert params == dense + experts // 4
    assert read == (dense + experts // 4) * 4 + EMBD * 4  # plus one embedding row


def test_the_default_model_reads_all_its_weights(default_model_path):
    info = model_info(default_model_path)
    assert info.tied_output and info.expert_count == 0
    assert info.decode_weight_bytes == info.weight_bytes  # tied: the 49152 x 576 table is the head
    assert info.active_params == info.n_params
    traffic = decode_traffic(info, "f16", 1000)
    assert traffic.bytes_per_token == info.weight_bytes + 1000 * kv_bytes_per_token(info, "f16")


def test_record_figures(default_model_path):
    info = model_info(default_model_path)
    figures = record_figures(info, "q8_0", 500, decode_tps=100.0, bandwidth_gbps=30.0)
    per_token = info.decode_weight_bytes + 500 * kv_bytes_per_token(info, "q8_0")
    assert figures == {"decode_bytes_per_token": per_token, "decode_gbps": round(per_token * 100 / 1e9, 2),
                       "memory_bandwidth_gbps": 30.0}
    assert record_figures(info, "f16", 0, 50.0, None)["memory_bandwidth_gbps"] is None
    # Why it is None, said only while it is: a new machine measures it after its first turn.
    assert record_figures(info, "f16", 0, 50.0, None, "measuring")["memory_bandwidth_note"] == "measuring"
    assert "memory_bandwidth_note" not in record_figures(info, "f16", 0, 50.0, 30.0, "measuring")


def test_the_speed_panel_line():
    per_token = 92 * 2**20
    line = decode_line(per_token, decode_tps=114.0, bandwidth_gbps=30.0)
    assert line == "decode reads 92.0 MiB/token; 11 GB/s of 30 GB/s (37%); bandwidth alone would allow ~311 tok/s"
    assert bound_tps(per_token, 30.0) == pytest.approx(30e9 / per_token)
    assert decode_line(per_token, 0.0, 30.0) == "decode reads 92.0 MiB/token; bandwidth alone would allow ~311 tok/s"
    assert decode_line(per_token, 114.0, None, "CUDA") == (
        "decode reads 92.0 MiB/token; 11 GB/s; memory bandwidth not measured on CUDA")
    assert decode_line(per_token, 114.0, None, "CPU", "measuring after this turn") == (
        "decode reads 92.0 MiB/token; 11 GB/s; memory bandwidth measuring after this turn")


def test_prefill_counts_two_flops_per_active_weight(default_model_path):
    info = model_info(default_model_path)
    assert prefill_flops_per_token(info) == 2 * info.n_params
    assert prefill_line(prefill_flops_per_token(info), 0.0) == "prefill needs ~0.27 GFLOP/token"
    line = prefill_line(prefill_flops_per_token(info), 1000.0)
    assert line == "prefill needs ~0.27 GFLOP/token; 269 GFLOP/s achieved"


def test_a_cached_info_from_before_these_fields_is_computed_again(default_model_path):
    from dataclasses import asdict

    from chatapp.engine.models.quant import SCHEMA, info_cache

    old = asdict(model_info(default_model_path))
    for key in ("expert_count", "expert_used_count", "tied_output", "decode_weight_bytes", "active_params"):
        del old[key]
    info_cache().put(default_model_path.resolve(), {"schema": SCHEMA, "info": old})
    assert model_info(default_model_path).decode_weight_bytes == 96_576_768
