"""Reading llama.cpp's graph tensors through its eval callback, in a context of its own on the
runtime's loaded model: the attention weights after the soft-max (`replay_soft_max`) and the
last row of any named tensor (`TapContext`, for the lens, surprise and the sampler chain)."""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from pathlib import Path

import llama_cpp
import numpy as np

from chatapp.engine.local.llama.batch import fill_batch, first_output
from chatapp.engine.local.llama.runtime import KV_GGML_TYPES, LlamaRuntime, quiet_stderr
from chatapp.errors import ModelError

# Kept apart from LlamaRuntime, as the speculative block is. The runtime's own context never has
# a callback (decode pays nothing); a capture builds a context of its own on the same loaded
# model, replays tokens through it, and frees it. What is kept, and why this way, is in
# chatapp.engine.inside.attention.

_SOFT_MAX = b"kq_soft_max-"
"""llama.cpp's name for the attention weights after the soft-max ("kq_soft_max-<layer>"); only
computed without flash attention."""
CAPTURE_KV_TYPE = "f16"
"""The capture context's own KV cache: a quantized V cache would need flash attention."""
CAPTURE_BATCH = 256
"""Tokens per batch in a replay (one ubatch each, so a callback knows the batch's positions),
fewer when the soft-max matrix of a batch would pass CAPTURE_SOFT_MAX_BYTES."""
CAPTURE_SOFT_MAX_BYTES = 256 * 2**20
"""Without flash attention llama.cpp forms batch x n_ctx x n_head float32 weights per layer: a
32k context with 64 heads would need 2 GiB at 256 tokens a batch, so long contexts replay in
smaller batches."""


def capture_batch(n_ctx: int, n_head: int) -> int:
    """Tokens per replay batch for this context and head count (16 to CAPTURE_BATCH)."""
    return max(16, min(CAPTURE_BATCH, CAPTURE_SOFT_MAX_BYTES // (n_ctx * max(n_head, 1) * 4)))


class _TensorHead(ctypes.Structure):
    """The leading fields of ggml.h's `struct ggml_tensor`; checked against ggml_nelements."""

    _fields_ = [("type", ctypes.c_int), ("buffer", ctypes.c_void_p), ("ne", ctypes.c_int64 * 4),
                ("nb", ctypes.c_size_t * 4)]


_GGML_BASE: ctypes.CDLL | None = None


def _ggml_base() -> ctypes.CDLL:
    """libggml-base from the binding's own lib folder: tensor names and ggml_backend_tensor_get
    (which copies from any backend's buffer)."""
    global _GGML_BASE  # loaded once, on the first capture
    if _GGML_BASE is None:
        lib = ctypes.CDLL(str(Path(llama_cpp.__file__).parent / "lib" / "libggml-base.so"))
        lib.ggml_get_name.restype, lib.ggml_get_name.argtypes = ctypes.c_char_p, [ctypes.c_void_p]
        lib.ggml_nelements.restype, lib.ggml_nelements.argtypes = ctypes.c_int64, [ctypes.c_void_p]
        lib.ggml_backend_tensor_get.restype = None
        lib.ggml_backend_tensor_get.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_size_t]
        _GGML_BASE = lib
    return _GGML_BASE


def model_n_head(runtime: LlamaRuntime) -> int:
    return int(llama_cpp.llama_model_n_head(runtime.model))


def has_eval_callback(runtime: LlamaRuntime) -> bool:
    """Whether the runtime's own context was made with cb_eval set (never, by design)."""
    return runtime.made_with_eval_callback


class _SoftMaxReader:
    """The cb_eval callback of one capture: asks for each layer's kq_soft_max while the batch
    holds wanted rows, and hands those rows, as float32 (n_head, rows, n_kv), to the collector
    (`chatapp.engine.inside.attention.SoftMaxCollector`). An error inside the callback is kept and raised
    after llama_decode returns; it never crosses into C."""

    def __init__(self, collector) -> None:
        self.collector = collector
        self.lib = _ggml_base()
        self.start = 0
        self.n_tokens = 0
        self.wanted: tuple[int, int] | None = None
        self.error: Exception | None = None
        self.callback = llama_cpp.ggml_backend_sched_eval_callback(self._on_node)

    def batch(self, start: int, n_tokens: int) -> None:
        self.start, self.n_tokens = start, n_tokens
        self.wanted = self.collector.rows_wanted(start, n_tokens)

    def _on_node(self, tensor, ask, _user_data) -> bool:
        if self.error is not None:
            return not ask  # ask: not wanted; data: go on computing (False would abandon the graph)
        try:
            if ask:
                return self.wanted is not None and self.lib.ggml_get_name(tensor).startswith(_SOFT_MAX)
            self._read(tensor)
        except Exception as exc:  # noqa: BLE001 - raised again by the replay, on the Python side
            self.error = exc
        return True

    def _read(self, tensor) -> None:
        head = _TensorHead.from_address(tensor)
        n_kv, n_tokens, n_head, n_stream = head.ne
        if head.type != llama_cpp.GGML_TYPE_F32 or n_kv * n_tokens * n_head * n_stream != \
                self.lib.ggml_nelements(tensor):
            raise ModelError("llama.cpp's soft-max tensor is not laid out as chatapp reads it")
        if n_tokens != self.n_tokens or n_stream != 1 or head.nb[0] != 4 or head.nb[1] != 4 * n_kv:
            raise ModelError(f"unexpected soft-max shape {tuple(head.ne)} for a batch of {self.n_tokens}")
        first, end = self.wanted
        rows = np.empty((n_head, end - first, n_kv), dtype=np.float32)
        for h in range(n_head):  # each head's wanted rows are contiguous
            self.lib.ggml_backend_tensor_get(tensor, rows[h].ctypes.data, h * head.nb[2] + first * head.nb[1],
                                             rows[h].nbytes)
        layer = int(self.lib.ggml_get_name(tensor)[len(_SOFT_MAX):])
        self.collector.take(layer, self.start + first, rows)


def _fill_replay_batch(batch, chunk: list[int], start: int, wanted: tuple[int, int] | None) -> None:
    """One sequence from position start; logits at the wanted rows only, or, when none are, at
    the last row (as llama_batch_get_one asks)."""
    first, end = wanted if wanted is not None else (len(chunk) - 1, len(chunk))
    for i, token in enumerate(chunk):
        batch.token[i] = token
        batch.pos[i] = start + i
        batch.n_seq_id[i] = 1
        batch.seq_id[i][0] = 0
        batch.logits[i] = first <= i < end
    batch.n_tokens = len(chunk)


def _argmax_rows(ctx, rows: range, n_vocab: int) -> np.ndarray:
    """int32 argmax of the last decode's logits at each batch row in `rows`."""
    found = np.empty(len(rows), dtype=np.int32)
    for n, row in enumerate(rows):
        logits = llama_cpp.llama_get_logits_ith(ctx, row)
        if not logits:
            raise ModelError(f"llama.cpp has no logits at replay row {row}")
        found[n] = int(np.argmax(np.ctypeslib.as_array(logits, shape=(n_vocab,))))
    return found


def replay_soft_max(runtime: LlamaRuntime, tokens, collector, should_stop: Callable[[], bool]) -> bool:
    """Run `tokens` from position 0 through a fresh capture context on the runtime's model (flash
    attention off, an f16 cache, cb_eval reading soft-max rows into `collector`, logits at the
    collector's rows only, their argmax to `collector.take_next`); False when should_stop cut it
    short. The runtime's own context and cache are not touched."""
    tokens = list(tokens)
    reader = _SoftMaxReader(collector)
    n_vocab = runtime.n_vocab
    abort = llama_cpp.ggml_abort_callback(lambda _data: bool(should_stop()))
    params = llama_cpp.llama_context_default_params()
    params.n_ctx = max(256, -(-len(tokens) // 256) * 256)
    batch = capture_batch(params.n_ctx, model_n_head(runtime))
    params.n_batch = params.n_ubatch = batch
    params.n_threads = params.n_threads_batch = runtime.threads[1]
    params.type_k = params.type_v = KV_GGML_TYPES[CAPTURE_KV_TYPE]
    params.flash_attn_type = llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED
    params.swa_full = True  # every cell stays, so cell i is position i for the whole replay
    params.no_perf = True
    params.cb_eval = reader.callback
    params.cb_eval_user_data = None
    with quiet_stderr():
        ctx = llama_cpp.llama_init_from_model(runtime.model, params)
    if not ctx:
        raise ModelError("llama.cpp could not make a context for the attention capture")
    rows = llama_cpp.llama_batch_init(batch, 0, 1)
    try:
        llama_cpp.llama_set_abort_callback(ctx, abort, None)
        for start in range(0, len(tokens), batch):
            chunk = tokens[start:start + batch]
            reader.batch(start, len(chunk))
            _fill_replay_batch(rows, chunk, start, reader.wanted)
            status = llama_cpp.llama_decode(ctx, rows)
            if reader.error is not None:
                raise reader.error
            if status == 2:
                return False
            if status != 0:
                raise ModelError(f"llama.cpp could not replay the turn (llama_decode returned {status})")
            if reader.wanted is not None:
                first, end = reader.wanted
                collector.take_next(start + first, _argmax_rows(ctx, range(first, end), n_vocab))
        llama_cpp.llama_synchronize(ctx)
        return True
    finally:
        llama_cpp.llama_batch_free(rows)
        llama_cpp.llama_free(ctx)


# --- inside the next token: a tap context and the sampler chain stage by stage -----------------
# The views of chatapp.engine.inside.{surprise,lens,sampler_chain} read llama.cpp through these.
# Like the attention capture, a tap context is a second context on the runtime's loaded model:
# the chat's own context never gets a callback, and its cache is never touched.

_TAP_BATCH = 512
"""Tokens per batch in a tap context (one ubatch, so a callback's rows are the batch's rows)."""


class _LastRowReader:
    """The cb_eval callback of a tap context: asks for the tensors whose names start with one of
    `prefixes` and keeps each one's last row (the batch's last output token) as float32, by name.
    Errors are kept and raised after llama_decode returns; they never cross into C."""

    def __init__(self, prefixes: tuple[bytes, ...]) -> None:
        self.prefixes = prefixes
        self.lib = _ggml_base()
        self.rows: dict[str, np.ndarray] = {}
        self.error: Exception | None = None
        self.callback = llama_cpp.ggml_backend_sched_eval_callback(self._on_node)

    def _on_node(self, tensor, ask, _user_data) -> bool:
        if self.error is not None:
            return not ask
        try:
            name = self.lib.ggml_get_name(tensor)
            if ask:
                return name.startswith(self.prefixes)
            head = _TensorHead.from_address(tensor)
            n_embd, n_rows = head.ne[0], head.ne[1]
            if head.type != llama_cpp.GGML_TYPE_F32 or head.ne[2] != 1 or head.ne[3] != 1 or head.nb[0] != 4:
                raise ModelError(f"llama.cpp's {name.decode()} tensor is not laid out as chatapp reads it")
            row = np.empty(n_embd, dtype=np.float32)
            self.lib.ggml_backend_tensor_get(tensor, row.ctypes.data, (n_rows - 1) * head.nb[1], row.nbytes)
            self.rows[name.decode()] = row
        except Exception as exc:  # noqa: BLE001 - raised again by decode, on the Python side
            self.error = exc
        return True


class TapContext:
    """A second llama.cpp context on `runtime`'s loaded model (one sequence): decode tokens at
    given positions and read the logits rows asked for, and, with `taps`, the last row of every
    graph tensor whose name starts with one of them (e.g. b"l_out-", each layer's output).
    Flash attention and the KV type follow the runtime's own context unless given, so a replay
    computes what a turn computed."""

    def __init__(self, runtime: LlamaRuntime, n_ctx: int, *, taps: tuple[bytes, ...] = (),
                 n_batch: int | None = None, flash_attn: bool | None = None, kv_type: str | None = None):
        self.n_vocab = runtime.n_vocab
        self._reader = _LastRowReader(taps) if taps else None
        params = llama_cpp.llama_context_default_params()
        params.n_ctx = max(256, -(-n_ctx // 256) * 256)
        self.n_batch = min(n_batch or _TAP_BATCH, params.n_ctx)
        params.n_batch = params.n_ubatch = self.n_batch
        params.n_threads, params.n_threads_batch = runtime.threads
        kv = kv_type or runtime.info.kv_type
        params.type_k = params.type_v = KV_GGML_TYPES[kv]
        flash = runtime.info.flash_attn if flash_attn is None else flash_attn
        params.flash_attn_type = (llama_cpp.LLAMA_FLASH_ATTN_TYPE_ENABLED if flash or kv != "f16"
                                  else llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED)
        params.swa_full = True
        params.no_perf = True
        if self._reader is not None:
            params.cb_eval = self._reader.callback
            params.cb_eval_user_data = None
        with quiet_stderr():
            self._ctx = llama_cpp.llama_init_from_model(runtime.model, params)
        if not self._ctx:
            raise ModelError("llama.cpp could not make a context to look inside the next token")
        self.n_ctx = int(llama_cpp.llama_n_ctx(self._ctx))
        self._memory = llama_cpp.llama_get_memory(self._ctx)
        self._batch = llama_cpp.llama_batch_init(self.n_batch, 0, 1)

    @property
    def tapped(self) -> dict[str, np.ndarray]:
        """The tapped tensors' last rows from the last decode, by tensor name."""
        return self._reader.rows if self._reader is not None else {}

    def clear(self) -> None:
        llama_cpp.llama_memory_clear(self._memory, True)

    def decode(self, tokens, start: int, outputs: str | int = "last", *, copy: bool = True) -> np.ndarray:
        """Decode `tokens` (at most n_batch) at positions start, start+1, ...; returns a copy of the
        logits rows asked for: "all" (one per token), "last" (one row) or those from row `outputs`
        on (llama-perplexity's second halves: the output head is a fifth of the default model's
        compute a row). `copy=False`: llama.cpp's
        own buffer instead, valid until this context's next decode (a 512-token window's rows are
        100 MB, and copying them cost a perplexity run 1.5% of its time)."""
        n = len(tokens)
        if not 0 < n <= self.n_batch:
            raise ModelError(f"a tap batch holds 1 to {self.n_batch} tokens, not {n}")
        if start + n > self.n_ctx:
            raise ModelError(f"{n} tokens from position {start} overflow the {self.n_ctx}-token tap context")
        batch = self._batch
        fill_batch(batch, tokens, start, outputs)
        if self._reader is not None:
            self._reader.rows = {}
        status = llama_cpp.llama_decode(self._ctx, batch)
        if self._reader is not None and self._reader.error is not None:
            error, self._reader.error = self._reader.error, None
            raise error
        if status != 0:
            raise ModelError(f"llama.cpp could not decode in the tap context (llama_decode returned {status})")
        first = first_output(outputs, n)
        rows = n - first
        address = llama_cpp.llama_get_logits_ith(self._ctx, first)
        if not address:
            raise ModelError("llama.cpp returned no logits in the tap context")
        found = np.ctypeslib.as_array(address, shape=(rows, self.n_vocab))
        return found.copy() if copy else found

    def close(self) -> None:
        if getattr(self, "_batch", None) is not None:
            llama_cpp.llama_batch_free(self._batch)
            self._batch = None
        if getattr(self, "_ctx", None):
            llama_cpp.llama_free(self._ctx)
            self._ctx = None

    def __del__(self):
        self.close()
