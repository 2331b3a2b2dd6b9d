"""Whether verify batches give single steps' logits exactly, measured here and now through
llama-cpp-python's own `Llama` (not chatapp's runtime, nor the check under test): the same ids
as chatapp's check decodes (exact_batches' three rounds), one at a time and as one batch, on the
same threads, flash-attention setting and cache type, their logits compared bit for bit. A test
asserts that chatapp's check agrees with this, rather than a verdict remembered from one machine
(on another CPU the same build may be exact where this one is not, or the other way)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import llama_cpp
import numpy as np

from chatapp.engine.local.exact_batches import CODE, DEEP, PROSE, check_sizes


def measured_exact(model: Path, prefix: list[int], tokens_of: Callable[[str], list[int]], *, threads: int,
                   flash_attn: bool, kv_type: str = "f16", largest: int = 9, n_ctx: int = 1024) -> bool:
    """True when every batch size the check decodes equals single steps, at each of its rounds,
    after `prefix` (what the runtime's cache held when it was checked)."""
    ggml_type = getattr(llama_cpp, f"GGML_TYPE_{kv_type.upper()}")
    llm = llama_cpp.Llama(model_path=str(model), n_ctx=n_ctx, n_batch=512, n_ubatch=512, n_threads=threads,
                          n_threads_batch=threads, flash_attn=flash_attn, type_k=ggml_type, type_v=ggml_type,
                          swa_full=True, logits_all=True, verbose=False)
    try:
        for text, fill in ((PROSE, 64), (CODE, 192), (PROSE, min(DEEP, n_ctx - largest))):
            tokens = tokens_of(text * (1 + (fill + largest) // 30))
            filler = tokens[:max(fill - len(prefix), 0)]
            probe = tokens[len(filler):len(filler) + largest]
            llm.reset()
            llm.eval(prefix + filler)
            base = llm.n_tokens
            singles = []
            for token in probe:
                llm.eval([token])
                singles.append(np.array(llm.scores[llm.n_tokens - 1]))
            for size in check_sizes(largest):
                llm.n_tokens = base  # eval drops the cells from here on before it decodes
                llm.eval(probe[:size])
                rows = llm.scores[base:base + size]
                if not all(np.array_equal(row, single) for row, single in zip(rows, singles)):
                    return False
        return True
    finally:
        llm.close()
