"""The one module that imports llama_cpp.

Everything else in chatapp talks to llama.cpp through `LlamaRuntime`, so the rest of the
engine stays testable and the binding's quirks stay in one place.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import llama_cpp
import numpy as np

from chatapp.config import KV_TYPES
from chatapp.engine.machine.hardware import physical_cores
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


class Sampler:
    """The turn's llama.cpp sampler chain. `sample` is llama_sampler_sample; `draw` applies the
    same chain to candidates the caller gives and says what it drew from (see local.probing)."""

    def __init__(self, ctx, *, temperature: float, top_k: int, top_p: float, min_p: float, seed: int,
                 n_vocab: int = 0, grammar: tuple[object, str] | None = None):
        """`grammar`: (the vocabulary, GBNF text with a `root` rule) the reply must follow."""
        self._ctx = ctx
        self.greedy = temperature <= 0
        """The chain is llama.cpp's greedy sampler (after the grammar, if any): the first largest
        logit, no state."""
        self._argmax = self.greedy and grammar is None and n_vocab > 0  # a row's view needs n_vocab
        self.top_k = top_k
        self.n_vocab = n_vocab
        self._data = np.zeros(0, dtype=_TOKEN_DATA)
        self._pointer = self._array = None
        self._rows: dict[int, np.ndarray] = {}
        params = llama_cpp.llama_sampler_chain_default_params()
        params.no_perf = True
        self._chain = llama_cpp.llama_sampler_chain_init(params)
        add = lambda s: llama_cpp.llama_sampler_chain_add(self._chain, s)  # noqa: E731
        if grammar is not None:
            constrained = llama_cpp.llama_sampler_init_grammar(grammar[0], grammar[1].encode("utf-8"), b"root")
            if not constrained:
                raise ModelError("llama.cpp refused the tool call's grammar")
            add(constrained)
        if temperature <= 0:
            add(llama_cpp.llama_sampler_init_greedy())
        else:
            add(llama_cpp.llama_sampler_init_top_k(top_k))
            add(llama_cpp.llama_sampler_init_top_p(top_p, 1))
            add(llama_cpp.llama_sampler_init_min_p(min_p, 1))
            add(llama_cpp.llama_sampler_init_temp(temperature))
            add(llama_cpp.llama_sampler_init_dist(llama_cpp.LLAMA_DEFAULT_SEED if seed < 0 else seed))

    def sample(self, row: int = -1) -> int:
        if self._argmax:
            # What the greedy chain picks (np.argmax also takes the first largest), read in place:
            # llama_sampler_sample first copies all 49k logits of the default model into a
            # candidate array, 70 µs a row here against 15-20 µs, on every decode step and on
            # every row of a verify batch.
            return int(np.argmax(self.logits(row)))
        return llama_cpp.llama_sampler_sample(self._chain, self._ctx, row)

    def logits(self, row: int = -1) -> np.ndarray:
        """Logits row `row` of the last decode, in place (valid until the next decode)."""
        address = ctypes.cast(llama_cpp.llama_get_logits_ith(self._ctx, row), ctypes.c_void_p).value
        if not address:
            raise ModelError(f"llama.cpp has no logits at row {row}")
        view = self._rows.get(address)
        if view is None:  # a row's place in llama.cpp's buffer repeats: one numpy view each
            view = self._rows[address] = np.frombuffer((ctypes.c_float * self.n_vocab).from_address(address),
                                                       dtype=np.float32)
        return view

    def draw(self, ids: np.ndarray, logits: np.ndarray) -> tuple[int, np.ndarray]:
        """What `sample` does, on these candidates instead of the whole vocabulary: the chain is
        applied to them, the selected one drawn and accepted. Returns it, with the candidates the
        chain kept (a copy; fields "id" and "p"): the distribution it drew from, except when
        greedy, where it is a point mass on the draw whatever "p" says. Equal to `sample` when the
        candidates include the top_k (the chain's first sampler keeps only those), or are every
        token. One copy and no conversion: this runs once per reply token, on caches the decode
        just filled, where each numpy call costs three times what it costs in a loop."""
        n = len(ids)
        if len(self._data) < n:  # one array struct per buffer: building them costs more than the chain
            self._data = np.zeros(n, dtype=_TOKEN_DATA)
            self._pointer = self._data.ctypes.data_as(llama_cpp.llama_token_data_p)
            self._array = llama_cpp.llama_token_data_array(data=self._pointer, size=n, selected=-1, sorted=False)
        data, array = self._data[:n], self._array
        data["id"], data["logit"], data["p"] = ids, logits, 0.0
        array.data, array.size, array.selected, array.sorted = self._pointer, n, -1, False
        llama_cpp.llama_sampler_apply(self._chain, ctypes.byref(array))
        if not 0 <= array.selected < array.size:
            raise ModelError("llama.cpp's sampler chain selected no token")
        if ctypes.cast(array.data, ctypes.c_void_p).value == self._data.ctypes.data:
            kept = self._data[:array.size]
        else:  # samplers may point `data` elsewhere (the binding's header says so): read where it points
            kept = np.ctypeslib.as_array(array.data, shape=(array.size,)).view(_TOKEN_DATA)
        token = int(kept["id"][array.selected])
        llama_cpp.llama_sampler_accept(self._chain, token)
        return token, kept.copy()

    def close(self) -> None:
        if self._chain is not None:
            llama_cpp.llama_sampler_free(self._chain)
            self._chain = None

    def __del__(self):
        self.close()


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
            with _quiet_stderr():
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
            text = "".join(f"{m['role']}: {m['content']}\n\n" for m in messages)
            return text + ("assistant:" if add_generation_prompt else "")
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
    def handles(self) -> tuple:
        """(llama_model, llama_context) for chatapp.engine.local.mtmd, which decodes image embeddings here."""
        return self._llm.model, self._llm.ctx

    def note_decoded(self, tokens: list[int]) -> None:
        """Book cells another module decoded after the cache's end (an image's) under `tokens`."""
        start, self._logits_at = self._llm.n_tokens, None
        self._llm.input_ids[start:start + len(tokens)] = tokens
        self._llm.n_tokens = start + len(tokens)

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
                min_p: float = 0.05, seed: int = -1, grammar: str | None = None) -> Sampler:
        """`grammar`: GBNF the reply must follow (call_gbnf)."""
        return Sampler(self._llm.ctx, temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p, seed=seed,
                       n_vocab=self.n_vocab, grammar=(self._vocab, grammar) if grammar else None)

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

    def close(self) -> None:
        llm, self._llm = getattr(self, "_llm", None), None
        if llm is not None:
            llm.close()


def _never() -> bool:
    return False


_NO_ABORT = ctypes.cast(None, llama_cpp.ggml_abort_callback)


@contextlib.contextmanager
def _quiet_stderr():
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
# Kept apart from LlamaRuntime so it can move with the engine's restructuring as one block.

_TOKEN_DATA = np.dtype([("id", np.int32), ("logit", np.float32), ("p", np.float32)], align=True)
assert _TOKEN_DATA.itemsize == ctypes.sizeof(llama_cpp.llama_token_data)


def can_remove_cells(runtime: LlamaRuntime) -> bool:
    """Whether rejected drafts can leave the cache: recurrent state (Mamba, RWKV, hybrids) cannot
    be cut back to a position, so drafting must stay off for those models."""
    model = runtime._llm.model
    return not (llama_cpp.llama_model_is_recurrent(model) or llama_cpp.llama_model_is_hybrid(model))


def fill_batch(batch, tokens: Sequence[int], start: int, outputs: str | int = "all") -> None:
    """Put `tokens` in a llama_batch of sequence 0 at positions start, start+1, ...; logits for
    every row ("all"), the last one ("last"), or every row from index `outputs` on."""
    n = len(tokens)
    first = first_output(outputs, n)
    for i, token in enumerate(tokens):
        batch.token[i] = token
        batch.pos[i] = start + i
        batch.n_seq_id[i] = 1
        batch.seq_id[i][0] = 0
        batch.logits[i] = i >= first
    batch.n_tokens = n


def first_output(outputs: str | int, n: int) -> int:
    """The first of `n` rows that `outputs` ("all", "last" or an index) asks logits for."""
    first = 0 if outputs == "all" else n - 1 if outputs == "last" else int(outputs)
    if not 0 <= first < n:
        raise ModelError(f"logits from row {first} of a {n}-token batch")
    return first


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
        self._n_vocab = llama_cpp.llama_vocab_n_tokens(runtime._vocab)

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
        rt._logits_at = None  # rows for every token; a rejection cuts the cache back under the last
        if llama_cpp.llama_decode(rt._llm.ctx, batch) != 0:
            rt.keep_kv_prefix(start)
            raise ModelError("llama.cpp could not decode the draft tokens")
        rt._llm.input_ids[start:start + len(tokens)] = tokens
        rt._llm.n_tokens = start + len(tokens)
        llama_cpp.llama_synchronize(rt._llm.ctx)

    def sample(self, row: int) -> int:
        # The turn's sampler: a greedy one takes the argmax in place (a verify step samples up to
        # draft_max + 1 rows), a probing one reports each row's step.
        return self._sampler.sample(row)

    def row_logits(self, row: int) -> np.ndarray:
        """A copy of logits row `row` of the last decode (-1: its last), before any sampler."""
        logits = llama_cpp.llama_get_logits_ith(self._runtime._llm.ctx, row)
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


class ChainDistribution:
    """The distribution `Sampler.sample` draws from at one logits row, as (ids, probs) arrays.

    llama_sampler_sample builds a llama_token_data_array of every token's logit, applies the
    chain, and takes the selected entry. This applies the same chain (top_k, top_p, min_p,
    temp; greedy at temperature 0) to the same array, ending in a `dist` sampler of its own:
    dist's apply computes each survivor's probability (softmax of the tempered logits) and
    writes it into the array before drawing, and its draw is ignored here, so the turn's own
    sampler and its random state are untouched. At temperature 0 the greedy sampler picks the
    first largest logit and the distribution is a point mass on it.
    """

    def __init__(self, runtime: LlamaRuntime, *, temperature: float, top_k: int = 40, top_p: float = 0.95,
                 min_p: float = 0.05):
        self._ctx = runtime._llm.ctx
        self._n_vocab = llama_cpp.llama_vocab_n_tokens(runtime._vocab)
        self._greedy = temperature <= 0
        # The same chain as Sampler's, with a fixed seed: only dist's probabilities are used.
        self._chain = Sampler(self._ctx, temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p, seed=0)
        self._data = np.zeros(self._n_vocab, dtype=_TOKEN_DATA)
        self._data["id"] = np.arange(self._n_vocab, dtype=np.int32)
        self._array = llama_cpp.llama_token_data_array(
            data=self._data.ctypes.data_as(llama_cpp.llama_token_data_p), size=self._n_vocab, selected=-1,
            sorted=False)

    def at(self, row: int = -1) -> tuple[np.ndarray, np.ndarray]:
        """Candidate ids and their probabilities (summing to 1) at logits row `row` of the last decode."""
        logits = llama_cpp.llama_get_logits_ith(self._ctx, row)
        if not logits:
            raise ModelError(f"llama.cpp has no logits at row {row}")
        self._data["id"] = np.arange(self._n_vocab, dtype=np.int32)
        self._data["logit"] = np.ctypeslib.as_array(logits, shape=(self._n_vocab,))
        self._data["p"] = 0.0
        array = self._array
        array.data = self._data.ctypes.data_as(llama_cpp.llama_token_data_p)
        array.size, array.selected, array.sorted = self._n_vocab, -1, False
        llama_cpp.llama_sampler_apply(self._chain._chain, ctypes.byref(array))
        # Samplers may point `data` elsewhere (the binding's header says so); read where it points.
        view = np.ctypeslib.as_array(array.data, shape=(array.size,)).view(_TOKEN_DATA)
        if self._greedy:
            return np.array([view["id"][array.selected]], dtype=np.int32), np.ones(1)
        return view["id"].copy(), view["p"].astype(np.float64)

    def close(self) -> None:
        self._chain.close()


# --- attention capture: llama.cpp's soft-max weights through its eval callback ---------------
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
    return int(llama_cpp.llama_model_n_head(runtime._llm.model))


def has_eval_callback(runtime: LlamaRuntime) -> bool:
    """Whether the runtime's own context was made with cb_eval set (never, by design). llama.cpp
    takes cb_eval only when a context is made (there is no setter), so the parameters it was
    made with tell."""
    return bool(runtime._llm.context_params.cb_eval)


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
    n_vocab = llama_cpp.llama_vocab_n_tokens(runtime._vocab)
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
    with _quiet_stderr():
        ctx = llama_cpp.llama_init_from_model(runtime._llm.model, params)
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
        with _quiet_stderr():
            self._ctx = llama_cpp.llama_init_from_model(runtime._llm.model, params)
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


SAMPLER_STAGES = ("top_k", "top_p", "min_p", "temperature", "dist")
"""The stages of chatapp's chain (Sampler) in llama.cpp's order; at temperature 0, "greedy" alone."""


class StagedSampler:
    """The session's sampler chain as llama.cpp's separate samplers, applied one after another to
    one candidate array with a snapshot after each: the same samplers, parameters and order as
    `Sampler` (so the same seed draws the same tokens), each one's effect visible. `dist` keeps its
    random state across `step` calls, one draw per token, as the turn's chain does."""

    def __init__(self, *, temperature: float, top_k: int, top_p: float, min_p: float, seed: int):
        if temperature <= 0:
            self.stages = (("greedy", llama_cpp.llama_sampler_init_greedy()),)
        else:
            self.stages = (
                ("top_k", llama_cpp.llama_sampler_init_top_k(top_k)),
                ("top_p", llama_cpp.llama_sampler_init_top_p(top_p, 1)),
                ("min_p", llama_cpp.llama_sampler_init_min_p(min_p, 1)),
                ("temperature", llama_cpp.llama_sampler_init_temp(temperature)),
                ("dist", llama_cpp.llama_sampler_init_dist(llama_cpp.LLAMA_DEFAULT_SEED if seed < 0 else seed)),
            )

    def step(self, logits: np.ndarray) -> tuple[int, list[tuple[str, np.ndarray]]]:
        """Apply every stage to all tokens' `logits`; returns the selected token and, per stage,
        its name and the candidates left (a copy; fields "id", "logit", "p"), in the order
        llama.cpp left them. Every stage is told the selected token afterwards (accept)."""
        n = len(logits)
        data = np.zeros(n, dtype=_TOKEN_DATA)
        data["id"] = np.arange(n, dtype=np.int32)
        data["logit"] = logits
        array = llama_cpp.llama_token_data_array(data=data.ctypes.data_as(llama_cpp.llama_token_data_p), size=n,
                                                 selected=-1, sorted=False)
        snapshots = []
        for name, sampler in self.stages:
            llama_cpp.llama_sampler_apply(sampler, ctypes.byref(array))
            view = np.ctypeslib.as_array(array.data, shape=(array.size,)).view(_TOKEN_DATA)
            snapshots.append((name, view.copy()))
        if not 0 <= array.selected < array.size:
            raise ModelError("llama.cpp's sampler chain selected no token")
        token = int(snapshots[-1][1]["id"][array.selected])
        for _name, sampler in self.stages:
            llama_cpp.llama_sampler_accept(sampler, token)
        return token, snapshots

    def close(self) -> None:
        for _name, sampler in getattr(self, "stages", ()):
            llama_cpp.llama_sampler_free(sampler)
        self.stages = ()

    def __del__(self):
        self.close()


def call_gbnf(schema: dict, prefix: str = "", suffix: str = "") -> str:
    """GBNF for `prefix` + a JSON value of `schema` + `suffix`, by llama.cpp's own converter
    (a tool call's grammar: chatapp.engine.tools.grammar)."""
    import json

    from llama_cpp.llama_grammar import json_schema_to_gbnf

    rules = json_schema_to_gbnf(json.dumps(schema)).replace("root ::=", "call ::=", 1)
    return f"root ::= {json.dumps(prefix)} call {json.dumps(suffix)}\n" + rules
