"""Before llama.cpp allocates anything: will this model, at this n_ctx and KV type, fit?

A context far larger than the machine (`--ctx 4294967296`) used to grow the process until the
kernel killed it, or fail inside numpy with a traceback. `check_load` estimates the memory from
the GGUF header alone (chatapp.engine.models.quant) and refuses in one line that names both figures.
It also refuses an n_ctx above the model's training context unless the settings allow it.

The estimate is what llama.cpp and the binding allocate and can touch at full context:

- the weights (mapped from the file, resident once read);
- the KV cache: K and V for every layer, per token, in the KV type (quant.kv_bytes_per_token);
- without flash attention (an f16 KV cache here), the compute buffer that holds one batch's
  attention scores against the whole context: n_ctx x n_batch x n_head f32 values;
- the logits of one batch, kept twice (llama.cpp's output buffer and the binding's copy), and
  the binding's token-id buffer of n_ctx int32.

Checked on SmolLM2-135M (Q4_1) at n_ctx 4,096 and 32,768 (f16): resident memory after a
300-token prefill was 219 and 850 MiB, against estimates of 446 and 1,580 MiB; the rest is
reserved for a context filled to the end. When layers are offloaded to a GPU, weights and KV
cache live in GPU memory, which psutil cannot see: only the training-context check applies.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import psutil

from chatapp.config import CTX_STEP, Settings
from chatapp.engine.models.quant import ModelInfo, kv_bytes_per_token, model_info
from chatapp.errors import ModelError
from chatapp.format import human_bytes

N_BATCH = 512
"""The batch size chatapp.engine.local.llama loads with (LoadOptions.n_batch)."""
LLAMA_MAX_CTX = 2**32 - CTX_STEP
"""llama.cpp holds n_ctx in a uint32."""


@dataclass(frozen=True)
class MemoryEstimate:
    weights: int
    kv_cache: int
    buffers: int

    @property
    def total(self) -> int:
        return self.weights + self.kv_cache + self.buffers


def estimate(info: ModelInfo, n_ctx: int, kv_type: str, n_batch: int = N_BATCH) -> MemoryEstimate:
    cells = -(-n_ctx // CTX_STEP) * CTX_STEP
    batch = min(n_batch, cells)
    scores = cells * batch * info.n_head * 4 if kv_type == "f16" else 0  # quantized KV turns flash attention on
    buffers = scores + 2 * batch * info.vocab_size * 4 + cells * 4
    return MemoryEstimate(info.weight_bytes, kv_bytes_per_token(info, kv_type) * cells, buffers)


def fits(info: ModelInfo, settings: Settings) -> bool:
    """Whether the model would load here at the settings' n_ctx and KV type (as `check_load` judges)."""
    return estimate(info, settings.n_ctx, settings.kv_type).total <= psutil.virtual_memory().available


def check_load(settings: Settings, path: Path, *, offloaded: bool = False) -> list[str]:
    """Refuse (ModelError, one line) a load that can't fit in memory or that exceeds the model's
    training context without `allow_long_ctx`; returns warnings to show, one line each."""
    try:
        info = model_info(path)
    except (OSError, ValueError) as exc:
        raise ModelError(f"cannot read {path}: {exc}") from None
    n_ctx = settings.n_ctx
    if not offloaded:
        need = estimate(info, n_ctx, settings.kv_type)
        memory = psutil.virtual_memory()
        if need.total > memory.available:
            raise ModelError(
                f"n_ctx {n_ctx:,} with KV type {settings.kv_type} needs about {human_bytes(need.total)} "
                f"(weights {human_bytes(need.weights)}, KV cache {human_bytes(need.kv_cache)}, buffers "
                f"{human_bytes(need.buffers)}) but this machine has {human_bytes(memory.available)} available "
                f"of {human_bytes(memory.total)}; use a smaller --ctx, or --kv-type q8_0 or q4_0")
    if n_ctx > LLAMA_MAX_CTX:
        raise ModelError(f"n_ctx {n_ctx:,} is above llama.cpp's limit of {LLAMA_MAX_CTX:,} tokens")
    notices = []
    trained = info.context_length
    if trained and n_ctx > trained:
        if not settings.allow_long_ctx:
            raise ModelError(f"n_ctx {n_ctx:,} is above the model's training context of {trained:,} tokens; pass "
                             "--allow-long-ctx (or set allow_long_ctx = true in the config) to use it anyway")
        notices.append(f"n_ctx {n_ctx:,} is above the model's training context of {trained:,} tokens: "
                       "replies may degrade past that point")
    return notices
