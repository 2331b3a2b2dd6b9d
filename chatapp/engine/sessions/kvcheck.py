"""Is a KV state's K/V data finite? A NaN or an infinity anywhere in the cache makes attention,
and so every logit of the first step after a restore, NaN: the "reply" is token 0, an empty
turn saved as if it were one.

The state file's checksum only proves the bytes are as written, and anyone can write them
(its layout is documented in chatapp.engine.sessions.statefile), so the payload is read here
before llama.cpp loads it. The payload is llama.cpp's `llama_state_seq_get_data()`, for the
build the fingerprint pins (llama-kv-cache.cpp, `state_write`):

    u32 magic 0xaf143cd8, i32 seq_id, then each KV cache (two for a sliding-window model):
      u32 n_stream; per stream: u32 cell_count, and when it is not 0:
        per cell: i32 pos, u32 n_seq_id, [a 12-byte extension for M-RoPE models], n_seq_id x i32
        u32 v_trans, u32 n_layer
        per layer: i32 K type, u64 K row bytes, cell_count rows
        per layer: i32 V type, u64 V row bytes, cell_count rows          (v_trans 0)
                or i32 V type, u32 element bytes, u32 rows, rows x cell_count elements  (v_trans 1)

A ggml block keeps its floats (f16 scale and minimum) at its start, and the other bytes of a
quantized block are small integers, which are always finite, so only those are looked at. A
payload this parser does not recognise (another kind of memory) is left to llama.cpp's own
checks: `non_finite` then says nothing.
"""

from __future__ import annotations

import struct

MAGIC = 0xAF143CD8
_F16_EXP, _BF16_EXP = 0x7C00, 0x7F80
BLOCKS = {0: ("f32", 4, 0), 1: ("f16", 2, 1), 30: ("bf16", 2, 1), 8: ("q8_0", 34, 1), 2: ("q4_0", 18, 1),
          3: ("q4_1", 20, 2), 6: ("q5_0", 22, 1), 7: ("q5_1", 24, 2), 20: ("iq4_nl", 18, 1)}
"""ggml type -> (name, block bytes, leading f16 values per block); f32 is its own float."""


class _Payload:
    def __init__(self, data: memoryview) -> None:
        self.data, self.at = data, 0

    def take(self, fmt: str) -> tuple:
        size = struct.calcsize(fmt)
        if self.at + size > len(self.data):
            raise ValueError("short")
        values = struct.unpack_from(fmt, self.data, self.at)
        self.at += size
        return values

    def skip(self, n: int) -> memoryview:
        if n < 0 or self.at + n > len(self.data):
            raise ValueError("short")
        part = self.data[self.at:self.at + n]
        self.at += n
        return part


def _bad_values(ggml_type: int, data: memoryview) -> bool:
    import numpy as np  # the sessions CLI commands that never restore need not load it

    if ggml_type not in BLOCKS or not len(data):
        return False  # a type whose floats we don't know where to find: left to llama.cpp
    _, block, floats = BLOCKS[ggml_type]
    if len(data) % block:
        raise ValueError("ragged")
    if ggml_type == 0:
        return not bool(np.isfinite(np.frombuffer(data, dtype="<f4")).all())
    halves = np.frombuffer(data, dtype="<u2").reshape(-1, block // 2)[:, :floats]
    mask = _BF16_EXP if ggml_type == 30 else _F16_EXP
    return bool(((halves & mask) == mask).any())


def _cache(reader: _Payload, ext: int) -> str | None:
    """One KV cache's streams: where its first non-finite value is, or None."""
    (n_stream,) = reader.take("<I")
    if not 0 < n_stream <= 64:
        raise ValueError("streams")
    for _ in range(n_stream):
        (cells,) = reader.take("<I")
        if cells == 0:
            continue
        for _ in range(cells):
            _pos, n_seq = reader.take("<iI")
            reader.skip(ext + 4 * n_seq)
        v_trans, n_layer = reader.take("<II")
        if v_trans > 1 or n_layer > 4096:
            raise ValueError("layers")
        found = None
        for layer in range(n_layer):
            k_type, row = reader.take("<iQ")
            if _bad_values(k_type, reader.skip(row * cells)) and found is None:
                found = f"layer {layer}'s keys"
        for layer in range(n_layer):
            if v_trans:
                v_type, element, rows = reader.take("<iII")
                size = element * rows * cells
            else:
                v_type, row = reader.take("<iQ")
                size = row * cells
            if _bad_values(v_type, reader.skip(size)) and found is None:
                found = f"layer {layer}'s values"
        if found:
            return found
    return None


def non_finite(payload: bytes | bytearray | memoryview) -> str | None:
    """Where the first NaN or infinity in a sequence-state payload is ("layer 3's keys"), or
    None when every value is finite or the layout is not one this module knows."""
    data = memoryview(payload).cast("B")
    for ext in (0, 12):  # the per-cell extension is there for M-RoPE models only
        reader = _Payload(data)
        try:
            magic, _seq = reader.take("<Ii")
            if magic != MAGIC:
                return None
            found = None
            while reader.at < len(data) and found is None:
                found = _cache(reader, ext)
            if found or reader.at == len(data):
                return found
        except ValueError:
            continue
    return None
