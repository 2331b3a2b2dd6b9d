"""Decode against the memory-bandwidth bound, prefill against compute: the figures and their line.

Decoding one token reads the weights it uses once (`ModelInfo.decode_weight_bytes`: every
matrix, the embedding's one row unless it is the output head too, the active experts only) and
the KV cells it attends to (kv_bytes_per_token x cells in use). Bytes per token x tok/s is the
traffic decode achieved; the measured memory bandwidth over bytes per token is the speed that
bandwidth alone would allow. Prefill multiplies each token by every active weight: about
2 x active_params FLOPs per token, a figure for compute rather than memory.

Not counted: activations and the logits (tens of KiB per token), and the cells llama.cpp pads
the attended range to (up to 255). So the achieved figure is a slight underestimate.
"""

from __future__ import annotations

from dataclasses import dataclass

from chatapp.engine.models.quant import ModelInfo, kv_bytes_per_token
from chatapp.format import human_bytes


@dataclass(frozen=True)
class DecodeTraffic:
    weight_bytes: int
    kv_bytes: int

    @property
    def bytes_per_token(self) -> int:
        return self.weight_bytes + self.kv_bytes


def decode_traffic(info: ModelInfo, kv_type: str, kv_used: int) -> DecodeTraffic:
    """Bytes one decoded token reads with `kv_used` cells in the cache."""
    return DecodeTraffic(info.decode_weight_bytes, kv_bytes_per_token(info, kv_type) * max(kv_used, 0))


def gb_per_s(bytes_per_token: int, tokens_per_s: float) -> float:
    return bytes_per_token * tokens_per_s / 1e9


def bound_tps(bytes_per_token: int, bandwidth_gbps: float) -> float:
    """The decode speed memory bandwidth alone would allow."""
    return bandwidth_gbps * 1e9 / bytes_per_token if bytes_per_token > 0 else 0.0


def record_figures(info: ModelInfo, kv_type: str, kv_used: int, decode_tps: float,
                   bandwidth_gbps: float | None, bandwidth_note: str = "") -> dict:
    """The turn record's keys. For a whole reply pass the mean of its first and last fill as
    `kv_used` (the cache grows by one cell a token, so that is the mean read per token).
    `bandwidth_note`: why the bandwidth is None this turn (e.g. it is measured after it)."""
    per_token = decode_traffic(info, kv_type, kv_used).bytes_per_token
    figures = {
        "decode_bytes_per_token": per_token,
        "decode_gbps": round(gb_per_s(per_token, decode_tps), 2),
        "memory_bandwidth_gbps": None if bandwidth_gbps is None else round(bandwidth_gbps, 2),
    }
    if bandwidth_gbps is None and bandwidth_note:
        figures["memory_bandwidth_note"] = bandwidth_note
    return figures


def prefill_flops_per_token(info: ModelInfo) -> int:
    return 2 * info.active_params


def _gb(value: float) -> str:
    return f"{value:.1f}" if value < 10 else f"{value:.0f}"


def decode_line(bytes_per_token: int, decode_tps: float, bandwidth_gbps: float | None, backend: str = "CPU",
                note: str = "") -> str:
    """The Speed panel's line, e.g. "decode reads 92.1 MiB/token; 11 GB/s of 30 GB/s (36%);
    bandwidth alone would allow ~330 tok/s". Parts without figures yet are left out; without a
    bandwidth, `note` says why (else: not measured on `backend`)."""
    parts = [f"decode reads {human_bytes(bytes_per_token)}/token"]
    achieved = gb_per_s(bytes_per_token, decode_tps)
    if bandwidth_gbps:
        if decode_tps > 0:
            parts.append(f"{_gb(achieved)} GB/s of {_gb(bandwidth_gbps)} GB/s ({achieved / bandwidth_gbps:.0%})")
        parts.append(f"bandwidth alone would allow ~{bound_tps(bytes_per_token, bandwidth_gbps):,.0f} tok/s")
    else:
        achieved_text = f"{_gb(achieved)} GB/s; " if decode_tps > 0 else ""
        parts.append(f"{achieved_text}memory bandwidth {note or f'not measured on {backend}'}")
    return "; ".join(parts)


def prefill_line(flops_per_token: int, prefill_tps: float) -> str:
    """E.g. "prefill needs ~0.27 GFLOP/token; 41 GFLOP/s achieved" (`prefill_flops_per_token`)."""
    text = f"prefill needs ~{flops_per_token / 1e9:.2g} GFLOP/token"
    if prefill_tps > 0:
        text += f"; {flops_per_token * prefill_tps / 1e9:,.0f} GFLOP/s achieved"
    return text
