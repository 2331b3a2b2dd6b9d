"""The drafting verify target: several tokens decoded as one batch with logits at every row, and
the rejected ones cut back out of the cache."""

from __future__ import annotations

import llama_cpp
import numpy as np

from chatapp.engine.local.llama.batch import fill_batch
from chatapp.engine.local.llama.runtime import LlamaRuntime
from chatapp.engine.local.llama.sampler import Sampler
from chatapp.errors import ModelError


class VerifyTarget:
    """`chatapp.engine.drafting.speculative.Target` over a runtime and the turn's `Sampler`.

    Multi-token steps go through a batch with logits at every row (`llama_batch_get_one` asks
    for the last row only). Rejected drafts leave through `keep_kv_prefix` (llama_memory_seq_rm
    from the first rejected position on), which also sets the runtime's count, so it stays equal
    to llama.cpp's cell count. llama.cpp runs batches of more than one token with the batch thread
    count; a caller that wants verify steps on the decode threads sets both to the same number.
    """

    def __init__(self, runtime: LlamaRuntime, sampler: Sampler, capacity: int = 16):
        self._runtime = runtime
        self._sampler = sampler
        self._capacity = capacity
        self._batch = llama_cpp.llama_batch_init(capacity, 0, 1)
        self._n_vocab = runtime.n_vocab

    @property
    def n_cached(self) -> int:
        return self._runtime.n_cached

    def decode(self, tokens) -> None:
        rt = self._runtime
        if len(tokens) == 1:
            rt.eval([tokens[0]])
            return
        if len(tokens) > self._capacity:
            raise ModelError(f"a verify batch holds at most {self._capacity} tokens, not {len(tokens)}")
        start = rt.n_cached
        if start + len(tokens) > rt.n_ctx:
            raise ModelError(f"{len(tokens)} more tokens would overflow the {rt.n_ctx}-token context")
        batch = self._batch
        fill_batch(batch, tokens, start)
        rt.forget_logits()  # rows for every token; a rejection cuts the cache back under the last
        if llama_cpp.llama_decode(rt.ctx, batch) != 0:
            rt.keep_kv_prefix(start)
            raise ModelError("llama.cpp could not decode the draft tokens")
        rt.record_batch(start, tokens)
        llama_cpp.llama_synchronize(rt.ctx)

    def sample(self, row: int) -> int:
        # The turn's sampler: a greedy one takes the argmax in place (a verify step samples up to
        # draft_max + 1 rows), a probing one reports each row's step.
        return self._sampler.sample(row)

    def row_logits(self, row: int) -> np.ndarray:
        """A copy of logits row `row` of the last decode (-1: its last), before any sampler."""
        logits = llama_cpp.llama_get_logits_ith(self._runtime.ctx, row)
        if not logits:
            raise ModelError(f"llama.cpp has no logits at row {row}")
        return np.ctypeslib.as_array(logits, shape=(self._n_vocab,)).copy()

    def truncate(self, n: int) -> None:
        self._runtime.keep_kv_prefix(n)

    def close(self) -> None:
        if self._batch is not None:
            llama_cpp.llama_batch_free(self._batch)
            self._batch = None

    def __del__(self):
        self.close()

