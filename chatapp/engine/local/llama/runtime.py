"""The loaded model and its one context: load, tokenize, render the chat, run batches, and keep
the KV cache of sequence 0 (cut, save, restore), with llama.cpp's own counters.

The other modules of this package read the same context through the accessors at the end of
`LlamaRuntime` (`ctx`, `model`, `vocab`, `record_batch`), never through the binding's object.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import llama_cpp
import numpy as np

from chatapp.config import KV_TYPES
from chatapp.engine.local.llama.sampler import Sampler
from chatapp.engine.machine.hardware import physical_cores
from chatapp.engine.models.base_model import render_fallback
from chatapp.engine.models.template import ChatTemplate
from chatapp.errors import ModelError

KV_GGML_TYPES = {name: getattr(llama_cpp, f"GGML_TYPE_{name.upper()}") for name in KV_TYPES}
_SPECIAL_ATTRS = llama_cpp.LLAMA_TOKEN_ATTR_CONTROL | llama_cpp.LLAMA_TOKEN_ATTR_UNKNOWN


@llama_cpp.llama_log_callback
def _drop_log(level, text, user_data):  # llama.cpp would print into the TUI otherwise
    return None


def silence_llama_logs() -> None:
    llama_cpp.llama_log_set(_drop_log, ctypes.c_void_p(0))


def versions() -> dict[str, str]:
    return {"llama-cpp-python": llama_cpp.__version__, "llama.cpp": llama_cpp_build()}


def llama_cpp_build() -> str:
    """The vendored llama.cpp's ggml version and commit, e.g. "ggml 0.25.3 (0c1e570)"."""
    lib = llama_cpp.llama_cpp._lib
    try:
        version, commit = lib.ggml_version, lib.ggml_commit
    except AttributeError:  # bindings built without these exports
        return "unknown"
    version.restype = commit.restype = ctypes.c_char_p
    return f"ggml {version().decode()} ({commit().decode()})"


def gpu_offload_supported() -> bool:
    return bool(llama_cpp.llama_supports_gpu_offload())


def backend_name() -> str:
    """The accelerator this build of llama.cpp runs on, read from its system info."""
    info = llama_cpp.llama_print_system_info().decode("utf-8", "replace")
    for marker, name in (("CUDA", "CUDA"), ("METAL", "Metal"), ("Metal", "Metal"), ("HIP", "ROCm"),
                         ("VULKAN", "Vulkan"), ("Vulkan", "Vulkan"), ("SYCL", "SYCL")):
        if f"{marker} :" in info or f"{marker} =" in info:
            return name
    return "CPU"


@dataclass(frozen=True)
class LoadOptions:
    n_ctx: int = 4096
    n_threads: int = 0
    """Threads for decode steps; 0 means one per physical core."""
    n_threads_batch: int = 0
    """Threads for prefill batches; 0 means one per physical core (the UI is idle while they run)."""
    n_gpu_layers: int = -1
    kv_type: str = "f16"
    n_batch: int = 512
    flash_attn: bool | None = None
    """None: on with GPU offload or a quantized KV cache (which requires it), off for an f16
    cache on the CPU, where it is slower past a few hundred tokens (chatapp.config.Settings.flash_attn).
    Speculative decoding needs it on for exact verify batches."""


@dataclass(frozen=True)
class RuntimeInfo:
    backend: str
    gpu_offload: bool
    layers_offloaded: int
    n_layer: int
    n_threads: int
    n_ctx: int
    kv_type: str
    flash_attn: bool


@dataclass(frozen=True)
class PerfCounters:
    """llama.cpp's own counters (llama_perf_context) since the last reset."""

    prompt_ms: float
    prompt_tokens: int
    eval_ms: float
    eval_tokens: int


class LlamaRuntime:
    """A loaded model plus one context (one sequence, id 0) and its KV cache."""

    def __init__(self, path: Path, options: LoadOptions = LoadOptions()):
        if options.kv_type not in KV_GGML_TYPES:
            raise ModelError(f"unknown KV type {options.kv_type!r}; use one of {', '.join(KV_GGML_TYPES)}")
        silence_llama_logs()
        threads = options.n_threads or physical_cores()
        threads_batch = options.n_threads_batch or physical_cores()
        offload = gpu_offload_supported()
        # A quantized V cache needs flash attention in llama.cpp.
        on_gpu = offload and options.n_gpu_layers != 0
        flash_attn = (on_gpu if options.flash_attn is None else options.flash_attn) or options.kv_type != "f16"
        # llama.cpp pads the context to a multiple of 256 cells; ask for that size up front so
        # the binding's token buffer and the real cache agree.
        n_ctx = -(-options.n_ctx // 256) * 256
        try:
            with quiet_stderr():
                self._llm = llama_cpp.Llama(
                    model_path=str(path),
                    n_ctx=n_ctx,
                    n_batch=min(options.n_batch, n_ctx),
                    n_ubatch=min(options.n_batch, n_ctx),
                    n_threads=threads,
                    n_threads_batch=threads_batch,
                    n_gpu_layers=options.n_gpu_layers if offload else 0,
                    type_k=KV_GGML_TYPES[options.kv_type],
                    type_v=KV_GGML_TYPES[options.kv_type],
                    flash_attn=flash_attn,
                    # Gemma-style sliding-window caches would forget tokens we need to reuse.
                    swa_full=True,
                    verbose=False,
                )
        except (ValueError, RuntimeError, OSError) as exc:
            raise ModelError(f"llama.cpp could not load {path}: {exc}") from None
        self.path = Path(path)
        self._vocab = llama_cpp.llama_model_get_vocab(self._llm.model)
        self._memory = llama_cpp.llama_get_memory(self._llm.ctx)
        n_layer = llama_cpp.llama_model_n_layer(self._llm.model)
        requested = n_layer + 1 if options.n_gpu_layers < 0 else options.n_gpu_layers
        offloaded = min(requested, n_layer + 1) if offload else 0
        self.info = RuntimeInfo(
            # A CUDA build asked for no GPU layers runs on the CPU (seen on an H200: gpu_layers 0).
            backend=backend_name() if offloaded else "CPU",
            gpu_offload=offload,
            layers_offloaded=offloaded,
            n_layer=n_layer,
            n_threads=threads,
            n_ctx=min(self._llm.n_ctx(), len(self._llm.input_ids)),
            kv_type=options.kv_type,
            flash_attn=flash_attn,
        )
        self._piece_cache: dict[int, bytes] = {}
        # Per-token facts asked once: every ctypes call releases the GIL, and in the TUI each
        # release can leave the decode thread waiting for the UI thread.
        self._special_cache: dict[int, bool] = {}
        self._eog_cache: dict[int, bool] = {}
        self._next_token = (llama_cpp.llama_token * 1)()
        self._next_batch = llama_cpp.llama_batch_get_one(self._next_token, 1)
        self._template = self._llm.metadata.get("tokenizer.chat_template")
        self._n_batch = min(options.n_batch, n_ctx)
        self._threads = (threads, threads_batch)
        self._should_stop: Callable[[], bool] = _never
        self._logits_at: int | None = None
        """The cache length whose last token's logits row -1 holds (None: no such row): valid until
        the next decode, or any change to the cache."""
        # One ctypes callback for the runtime's life: llama.cpp keeps the pointer while a prefill runs.
        self._abort_callback = llama_cpp.ggml_abort_callback(lambda _data: bool(self._should_stop()))
        self._chat_template: ChatTemplate | None = None

    # --- model facts -----------------------------------------------------------------
    @property
    def metadata(self) -> dict[str, str]:
        return dict(self._llm.metadata)

    @property
    def kv_bytes_per_token(self) -> int:
        """Bytes one token occupies in the KV cache: K and V rows for every layer."""
        from chatapp.engine.models.quant import kv_bytes_per_token, model_info

        return kv_bytes_per_token(model_info(self.path), self.info.kv_type)

    # --- tokenizer -----------------------------------------------------------------
    @property
    def n_ctx(self) -> int:
        return self.info.n_ctx

    def tokenize(self, text: str, *, special: bool, add_bos: bool = False) -> list[int]:
        return self._llm.tokenize(text.encode("utf-8"), add_bos=add_bos, special=special)

    @property
    def adds_bos(self) -> bool:
        return bool(llama_cpp.llama_vocab_get_add_bos(self._vocab))

    @property
    def bos_id(self) -> int:
        return self._llm.token_bos()

    def token_bytes(self, token: int) -> bytes:
        """The bytes a token stands for; special tokens render as their text."""
        piece = self._piece_cache.get(token)
        if piece is None:
            buf = ctypes.create_string_buffer(64)
            n = llama_cpp.llama_token_to_piece(self._vocab, token, buf, len(buf), 0, True)
            if n < 0:
                buf = ctypes.create_string_buffer(-n)
                n = llama_cpp.llama_token_to_piece(self._vocab, token, buf, len(buf), 0, True)
            piece = buf.raw[:n]
            self._piece_cache[token] = piece
        return piece

    def is_special(self, token: int) -> bool:
        special = self._special_cache.get(token)
        if special is None:
            special = bool(llama_cpp.llama_vocab_get_attr(self._vocab, token) & _SPECIAL_ATTRS)
            self._special_cache[token] = special
        return special

    def is_end_of_generation(self, token: int) -> bool:
        eog = self._eog_cache.get(token)
        if eog is None:
            eog = bool(llama_cpp.llama_vocab_is_eog(self._vocab, token))
            self._eog_cache[token] = eog
        return eog

    # --- chat template -------------------------------------------------------------
    def render_chat(self, messages: list[dict[str, str]], *, add_generation_prompt: bool,
                    tools: list[dict] | None = None, switches: Mapping[str, bool] | None = None) -> str:
        """Apply the model's own chat template (the GGUF's tokenizer.chat_template); `switches`
        are the template's own flags (see chatapp.engine.backend.Backend.render)."""
        if not self._template:
            # A base model without a template: plain role-prefixed text keeps turns apart.
            return render_fallback(messages, add_generation_prompt=add_generation_prompt)
        if self._chat_template is None:  # sandboxed, time-limited; raises ModelError in one line
            self._chat_template = ChatTemplate(
                self._template,
                eos_token=self.token_bytes(self._llm.token_eos()).decode("utf-8", "replace"),
                bos_token=self.token_bytes(self._llm.token_bos()).decode("utf-8", "replace"),
            )
        return self._chat_template.render(messages, add_generation_prompt=add_generation_prompt, tools=tools,
                                          switches=switches)

    # --- KV cache ------------------------------------------------------------------
    @property
    def kv_tokens(self) -> list[int]:
        """Token ids whose keys and values are in the cache, in position order."""
        return self._llm.input_ids[: self._llm.n_tokens].tolist()

    def kv_cells_used(self) -> int:
        return int(llama_cpp.llama_memory_seq_pos_max(self._memory, 0)) + 1

    def keep_kv_prefix(self, n: int) -> None:
        """Forget every cached token from position n on."""
        n = max(0, min(n, self._llm.n_tokens))
        if n != self._llm.n_tokens:
            self._logits_at = None
        llama_cpp.llama_memory_seq_rm(self._memory, 0, n, -1)
        self._llm.n_tokens = n

    def clear_kv(self) -> None:
        llama_cpp.llama_memory_clear(self._memory, True)
        self._llm.n_tokens = 0
        self._logits_at = None

    @property
    def n_cached(self) -> int:
        """Tokens in the cache by the binding's count, which `eval` keeps equal to llama.cpp's."""
        return self._llm.n_tokens

    @property
    def logits_ready(self) -> bool:
        """Whether logits row -1 is the one after the cache's last token, as the last decode left it
        (a sampler can draw the next token without running that token again)."""
        return self._logits_at is not None and self._logits_at == self._llm.n_tokens

    def last_logits(self) -> np.ndarray | None:
        """A copy of the logits after the cache's last token while the last decode's are there
        (else None): `put_logits` gives them back after the cache is cut to this position."""
        if not self.logits_ready:
            return None
        row = llama_cpp.llama_get_logits_ith(self._llm.ctx, -1)
        return np.ctypeslib.as_array(row, shape=(self.n_vocab,)).copy() if row else None

    def put_logits(self, logits: np.ndarray) -> bool:
        """Logits after the cache's last token, as `last_logits` copied them at this position: written
        into llama.cpp's last row, so the next token is sampled without running the last one again."""
        row = llama_cpp.llama_get_logits_ith(self._llm.ctx, -1)
        if not row or logits.shape != (self.n_vocab,):
            return False
        np.ctypeslib.as_array(row, shape=(self.n_vocab,))[:] = logits
        self._logits_at = self._llm.n_tokens
        return True

    def eval(self, tokens: list[int]) -> None:
        """Run tokens through the model after what is cached, filling the KV cache."""
        if len(tokens) == 1:
            self.decode_one(tokens[0])
            return
        for start in range(0, len(tokens), self.n_batch):
            self.prefill(tokens[start:start + self.n_batch])

    def decode_one(self, token: int) -> None:
        """A decode step: one llama.cpp call where `Llama.eval` makes two; positions follow the cache."""
        if self._llm.n_tokens + 1 > self.n_ctx:
            raise ModelError(f"one more token would overflow the {self.n_ctx}-token context")
        self._next_token[0] = token
        self._logits_at = None
        if llama_cpp.llama_decode(self._llm.ctx, self._next_batch) != 0:
            raise ModelError("llama.cpp could not decode the next token")
        self._llm.input_ids[self._llm.n_tokens] = token
        self._llm.n_tokens += 1
        self._logits_at = self._llm.n_tokens
        # llama.cpp books a decode's time into its perf counters only at synchronisation.
        llama_cpp.llama_synchronize(self._llm.ctx)

    def prefill(self, tokens: list[int], should_stop: Callable[[], bool] | None = None) -> bool:
        """Evaluate up to n_batch tokens as one batch after what is cached (logits for the last).

        With `should_stop`, llama.cpp asks it between graph nodes and abandons the batch when it
        says so: False comes back, the ubatches already done stay in the cache, and the runtime's
        count follows llama.cpp's. Only prefill pays for the callback; decode steps never do.
        """
        start = self._llm.n_tokens
        if start + len(tokens) > self.n_ctx:
            raise ModelError(f"{len(tokens)} more tokens would overflow the {self.n_ctx}-token context")
        if len(tokens) > self.n_batch:
            raise ModelError(f"a prefill batch holds at most {self.n_batch} tokens, not {len(tokens)}")
        ids = (llama_cpp.llama_token * len(tokens))(*tokens)
        batch = llama_cpp.llama_batch_get_one(ids, len(tokens))
        if should_stop is not None:
            self._should_stop = should_stop
            llama_cpp.llama_set_abort_callback(self._llm.ctx, self._abort_callback, None)
        self._logits_at = None
        try:
            status = llama_cpp.llama_decode(self._llm.ctx, batch)
        finally:
            if should_stop is not None:
                llama_cpp.llama_set_abort_callback(self._llm.ctx, _NO_ABORT, None)
                self._should_stop = _never
        if status not in (0, 2):
            raise ModelError(f"llama.cpp could not evaluate the prompt (llama_decode returned {status})")
        done = len(tokens) if status == 0 else max(self.kv_cells_used() - start, 0)
        self._llm.input_ids[start:start + done] = tokens[:done]
        self._llm.n_tokens = start + done
        llama_cpp.llama_synchronize(self._llm.ctx)
        if status == 0:
            self._logits_at = self._llm.n_tokens
        return status == 0

    @property
    def n_batch(self) -> int:
        return self._n_batch

    def set_threads(self, decode: int, batch: int) -> None:
        """Threads for single-token decode steps and for multi-token batches (prefill)."""
        llama_cpp.llama_set_n_threads(self._llm.ctx, decode, batch)
        self._threads = (decode, batch)

    @property
    def threads(self) -> tuple[int, int]:
        """(decode, batch) threads in use."""
        return self._threads

    def seq_state(self) -> memoryview:
        """The KV cache of sequence 0, serialised by llama.cpp (no logits, no scores), as a view
        of the buffer llama.cpp wrote: no copy after llama.cpp's own (a branch switch stashes one
        on the way to a turn), and writable, so restoring it reads it in place too."""
        size = llama_cpp.llama_state_seq_get_size(self._llm.ctx, 0)
        buf = bytearray(size)
        written = llama_cpp.llama_state_seq_get_data(self._llm.ctx, (ctypes.c_uint8 * size).from_buffer(buf), size, 0)
        return memoryview(buf)[:written]

    def restore_seq_state(self, payload: bytes, tokens: list[int]) -> bool:
        """Load a seq_state() payload covering `tokens`; False leaves an empty cache."""
        self.clear_kv()
        if len(tokens) > self.n_ctx:
            return False
        try:  # a writable buffer (bytearray, or a view of one) is read in place, without a copy
            buf = (ctypes.c_uint8 * len(payload)).from_buffer(payload)
        except TypeError:
            buf = (ctypes.c_uint8 * len(payload)).from_buffer_copy(payload)
        read = llama_cpp.llama_state_seq_set_data(self._llm.ctx, buf, len(payload), 0)
        if read == 0 or self.kv_cells_used() != len(tokens):
            self.clear_kv()
            return False
        self._llm.input_ids[: len(tokens)] = tokens
        self._llm.n_tokens = len(tokens)
        return True

    # --- sampling and counters -----------------------------------------------------
    def sampler(self, *, temperature: float, top_k: int = 40, top_p: float = 0.95,
                min_p: float = 0.05, seed: int = -1, grammar: str | None = None,
                count_mask: bool = False) -> Sampler:
        """`grammar`: GBNF the reply must follow (call_gbnf); `count_mask`: see Sampler."""
        return Sampler(self._llm.ctx, temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p, seed=seed,
                       n_vocab=self.n_vocab, grammar=(self._vocab, grammar) if grammar else None,
                       count_mask=count_mask)

    @property
    def n_ctx_train(self) -> int:
        """The context length the model was trained for, as llama.cpp read it from the GGUF."""
        return int(llama_cpp.llama_model_n_ctx_train(self._llm.model))

    @property
    def n_vocab(self) -> int:
        return int(llama_cpp.llama_vocab_n_tokens(self._vocab))

    def perf(self) -> PerfCounters:
        data = llama_cpp.llama_perf_context(self._llm.ctx)
        # llama.cpp reports a count of at least 1 even when nothing ran; the time tells.
        prompt_tokens = data.n_p_eval if data.t_p_eval_ms > 0 else 0
        eval_tokens = data.n_eval if data.t_eval_ms > 0 else 0
        return PerfCounters(data.t_p_eval_ms, prompt_tokens, data.t_eval_ms, eval_tokens)

    def reset_perf(self) -> None:
        llama_cpp.llama_perf_context_reset(self._llm.ctx)

    # --- for the other modules of this package: the same context, never the binding's object ---
    @property
    def ctx(self):
        """llama.cpp's context (a llama_context pointer)."""
        return self._llm.ctx

    @property
    def model(self):
        """llama.cpp's loaded model (a llama_model pointer)."""
        return self._llm.model

    @property
    def vocab(self):
        return self._vocab

    @property
    def made_with_eval_callback(self) -> bool:
        """Whether the context was made with cb_eval set (never, by design). llama.cpp takes cb_eval
        only when a context is made (there is no setter), so the parameters it was made with tell."""
        return bool(self._llm.context_params.cb_eval)

    def forget_logits(self) -> None:
        """A decode is about to change which rows hold logits: row -1 no longer follows the cache."""
        self._logits_at = None

    def record_batch(self, start: int, tokens) -> None:
        """The caller decoded `tokens` at positions start, start+1, ... in this context: the
        runtime's count and ids follow llama.cpp's cells."""
        self._llm.input_ids[start:start + len(tokens)] = tokens
        self._llm.n_tokens = start + len(tokens)

    def close(self) -> None:
        llm, self._llm = getattr(self, "_llm", None), None
        if llm is not None:
            llm.close()


def _never() -> bool:
    return False


_NO_ABORT = ctypes.cast(None, llama_cpp.ggml_abort_callback)


@contextlib.contextmanager
def quiet_stderr():
    """Backends print straight to fd 2 while loading; keep that out of the terminal."""
    try:
        fd = sys.stderr.fileno()
    except (AttributeError, OSError, ValueError):
        fd = -1
    if fd < 0:  # inside the TUI stderr is not a real file; there is nothing to hide
        yield
        return
    saved = os.dup(fd)
    try:
        with open(os.devnull, "w") as devnull:
            os.dup2(devnull.fileno(), fd)
            yield
    finally:
        os.dup2(saved, fd)
        os.close(saved)


# --- speculative decoding: verify batches and the sampler chain's distribution ---------------


def can_remove_cells(runtime: LlamaRuntime) -> bool:
    """Whether rejected drafts can leave the cache: recurrent state (Mamba, RWKV, hybrids) cannot
    be cut back to a position, so drafting must stay off for those models."""
    model = runtime.model
    return not (llama_cpp.llama_model_is_recurrent(model) or llama_cpp.llama_model_is_hybrid(model))

