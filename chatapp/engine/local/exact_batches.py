"""Whether a verify batch gives exactly a single step's logits, for this model, build and machine.

Drafting keeps replies byte for byte what plain decoding gives only if row i of a batch of m
tokens holds the very logits that decoding those tokens one at a time gives. That is up to
llama.cpp's kernels, and measured on the development machine (ggml 0.25.3, x86-64 AVX2, flash
attention on) it often fails:
- With an f16 KV cache, a single-token step over 256+ cells (llama.cpp then attends to 512 or
  more) splits the attention across threads and adds the parts up (ops.cpp, "split KV path");
  a batch does not. SmolLM2-135M's rows were exact up to 256 cells and differed by ~0.6 in a
  logit beyond. A quantized KV cache (q8_0, q4_0) takes neither path: exact at every fill tried.
- gemma-3-270m Q4_K_M differed at 2 to 8 tokens whatever the fill, by up to 1.4 in a logit
  (its Q4_K weights are repacked for batched products), and where it first differed moved with
  the text.
So the engine checks rather than assumes, and drafts only where the check passes.

The check decodes fixed texts after whatever the cache holds, at three depths (64 cells, 192,
and as deep as the context goes up to 600): `largest` tokens one at a time, keeping each step's
logits, then as one batch of each size in `check_sizes(largest)` (every size to 9, then a few up
to `largest`: 12, 16, 24, 32, 48, 64), comparing row by row, bit for bit. Drafting then verifies
only at the sizes checked, so an unchecked size never decodes. It stops at the first difference,
removes every cell it added (the cache ends as it began) and is cached per model file, llama.cpp
build, CPU, KV type, flash attention, offload and thread count. It runs once per thread count,
after the first drafted turn (chatapp.engine.local.drafting), never before a first token; that
turn drafts only where `prior_exact` says the kernels leave no room for a difference.
Passing is evidence, not proof; on the default model the tests also compare whole greedy
replies with drafts and without.
"""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import asdict, dataclass, field

import numpy as np

from chatapp.engine.filecache import FileCache
from chatapp.engine.machine.hardware import cpu_name
from chatapp.engine.local.llama import LlamaRuntime, VerifyTarget, versions
from chatapp.engine.models.gguf_header import HeaderError
from chatapp.engine.models.quant import model_info

PROSE = ("The old lighthouse stood on a rocky point at the edge of the bay. Every evening the keeper "
         "climbed the spiral stairs, trimmed the wick and polished the great glass lens until it shone. "
         "Ships passing in the night saw its beam sweep across the water and knew they were close to home. ")
CODE = ("def summarize(orders, tax_rate):\n    subtotal = sum(o.price * o.quantity for o in orders)\n"
        "    tax = subtotal * tax_rate\n    return {'subtotal': subtotal, 'tax': tax, 'total': subtotal + tax}\n")
DEEP = 600
"""The deepest fill checked, when the context has room: past llama.cpp's 512-cell attention threshold."""
CACHE = "verify_batches_3"
"""Where checks are kept. The 2: the first check looked at two shallow depths only, and passed
with an f16 cache; its entries must not be read as covering the deep fill. The 3: checks name
the sizes they decoded (past 9 not every size is checked)."""
EVERY_SIZE_TO = 9
LONG_SIZES = (12, 16, 24, 32, 48, 64)
"""Batch sizes checked past EVERY_SIZE_TO: long drafts pay on a CPU (a batch of 48 costs far
fewer than 48 steps), and a handful of sizes keeps the check to a few seconds."""


def check_sizes(largest: int) -> tuple[int, ...]:
    """The batch sizes a check of batches up to `largest` tokens decodes, in order."""
    sizes = {m for m in range(2, min(largest, EVERY_SIZE_TO) + 1)}
    sizes |= {m for m in LONG_SIZES if m <= largest}
    if largest >= 2:
        sizes.add(largest)
    return tuple(sorted(sizes))


@dataclass(frozen=True)
class BatchCheck:
    checked: int
    """The largest batch size looked at."""
    exact: int
    """Every size from 2 to this gave single steps' logits exactly (1: not even 2 tokens did)."""
    worst: float = 0.0
    """The largest logit difference at the first size that differed (0.0 when none did)."""
    fill: int = 0
    """Cells in the cache before the batch that differed (0 when none did)."""
    ratios: dict[int, float] = field(default_factory=dict, compare=False)
    """Wall time of a batch of m tokens over a single step's, per size m the check decoded (the
    median over its depths). What the draft policy starts from: on a compute-bound CPU a batch
    costs far from one step, and how far changes with m in steps no straight line fits."""

    @property
    def passed(self) -> bool:
        """Every size checked gave single steps' logits exactly."""
        return self.exact == self.checked

    @property
    def sizes(self) -> tuple[int, ...]:
        """The batch sizes found exact, the only ones drafting may verify at."""
        return tuple(m for m in check_sizes(self.checked) if m <= self.exact) if self.passed else ()

    def covers(self, size: int) -> bool:
        """Whether this check answers for batches of up to `size` tokens (a failure answers for all)."""
        return self.checked >= size or not self.passed


REPACKED_ON_CPU = frozenset({"Q4_0", "Q4_K", "Q2_K", "IQ4_NL"})
"""Weight types llama.cpp's CPU backend repacks for batched products (ggml-cpu/repack.cpp,
ggml_repack_get_optimal_repack_type): a batch then multiplies through other kernels than a
single step, and gemma-3-270m's Q4_K rows differed by up to 1.4 in a logit."""
QUANTIZED_KV = frozenset({"q8_0", "q4_0"})


def prior_exact(runtime: LlamaRuntime) -> str:
    """Why a batch's rows are single steps' logits here before any check ("" when nothing says
    so): on the CPU with flash attention and a quantized cache, attention takes one path for a
    batch and a step (an f16 cache splits a step's long attention over threads, see the module),
    and weights of no repacked type go through the same matrix kernels, row by row. Measured
    here: SmolLM2-135M Q4_1 with q8_0 was exact at every fill, size and thread count checked.
    Only the first turn on a thread count drafts on it: the check runs after that turn.

    The types are the model's census (`model_info`, scanned at load and cached), not the header
    read again: that read put 14-15 ms between a fresh home's first drafted prefill and its first
    token (`ask --json`, ttft_ms - prefill_ms: 29-31 against 13 without drafting). The census
    counts 1-D tensors too, but those are never of a repacked type: llama.cpp quantizes only
    tensors of two or more dimensions, and its converters write the rest as floats."""
    info = runtime.info
    if info.gpu_offload or info.layers_offloaded or not info.flash_attn or info.kv_type not in QUANTIZED_KV:
        return ""
    try:
        types = set(model_info(runtime.path).tensor_mix)
    except (HeaderError, OSError):
        return ""
    if types & REPACKED_ON_CPU:
        return ""
    return (f"flash attention with a {info.kv_type} cache on the CPU, weights of types "
            f"{', '.join(sorted(types))} (none repacked for batches)")


def settings_key(runtime: LlamaRuntime, threads: int) -> str:
    info = runtime.info
    return (f"{versions()['llama.cpp']}|{cpu_name()}|{info.backend}|layers {info.layers_offloaded}|"
            f"{info.kv_type}|flash_attn {info.flash_attn}|threads {threads}")


def settings_entry(cache: str, runtime: LlamaRuntime, threads: int) -> object:
    """What FileCache `cache` keeps for this model under settings_key (None when nothing)."""
    entry = FileCache(cache).get(runtime.path)
    return entry.get(settings_key(runtime, threads)) if isinstance(entry, dict) else None


def put_settings_entry(cache: str, runtime: LlamaRuntime, threads: int, value: object) -> None:
    """Keep `value` for this model under settings_key, beside the other settings' entries."""
    files = FileCache(cache)
    entry = files.get(runtime.path)
    files.put(runtime.path, {**(entry if isinstance(entry, dict) else {}), settings_key(runtime, threads): value})


def _count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_CHECKED


MAX_CHECKED = 1 << 20
"""More than any batch or fill a check decodes: a cached figure past it was not written here."""


def cached_check(runtime: LlamaRuntime, threads: int) -> BatchCheck | None:
    """The check cached for these settings, or None when there is none or the entry is not one
    `remember` wrote (an edited cache is checked again, never trusted, never a crash)."""
    found = settings_entry(CACHE, runtime, threads)
    try:
        check = BatchCheck(**found) if isinstance(found, dict) else None
    except TypeError:
        return None
    if check is None or not (_count(check.checked) and _count(check.exact) and _count(check.fill)):
        return None
    if not (isinstance(check.worst, (int, float)) and not isinstance(check.worst, bool)
            and 0 <= check.worst):  # NaN is not; a difference may be infinite
        return None
    try:  # JSON keeps the sizes as strings
        ratios = {int(m): float(r) for m, r in check.ratios.items()}
    except (AttributeError, TypeError, ValueError):
        ratios = {}
    ratios = {m: r for m, r in ratios.items() if 1 < m <= MAX_CHECKED and 0 < r < math.inf}
    return BatchCheck(check.checked, check.exact, float(check.worst), check.fill, ratios)


def remember(runtime: LlamaRuntime, threads: int, check: BatchCheck) -> None:
    put_settings_entry(CACHE, runtime, threads, asdict(check))


def check_batches(runtime: LlamaRuntime, largest: int) -> BatchCheck | None:
    """Check batches of 2 to `largest` tokens now (see the module docstring), at each depth the
    context has room for after what it holds; None when it has room for none."""
    deep = min(DEEP, runtime.n_ctx - largest)
    done = None
    timed: dict[int, list[float]] = {}
    for text, fill in ((PROSE, 64), (CODE, 192), (PROSE, deep)):
        check = _check_round(runtime, largest, text, fill)
        if check is not None and not check.passed:
            return check
        if check is not None:
            for m, ratio in check.ratios.items():
                timed.setdefault(m, []).append(ratio)
        done = check or done
    if done is None:
        return None
    return BatchCheck(done.checked, done.exact, ratios={m: statistics.median(r) for m, r in timed.items()})


def _check_round(rt: LlamaRuntime, largest: int, text: str, fill: int) -> BatchCheck | None:
    start = rt.n_cached
    tokens = rt.tokenize(text * (1 + (fill + largest) // 30), special=False)
    filler = tokens[:max(fill - start, 0)]
    if start + len(filler) + largest > rt.n_ctx or len(filler) + largest > len(tokens):
        return None
    probe = tokens[len(filler):len(filler) + largest]
    sampler = rt.sampler(temperature=0.0)
    target = VerifyTarget(rt, sampler, capacity=largest)
    try:
        if filler:
            rt.eval(filler)
        base = rt.n_cached
        singles, single_s = [], []
        for token in probe:
            started = time.perf_counter()
            target.decode([token])
            single_s.append(time.perf_counter() - started)
            singles.append(target.row_logits(-1))
        step_s = statistics.median(single_s)
        ratios = {}
        for size in check_sizes(largest):
            rt.keep_kv_prefix(base)
            started = time.perf_counter()
            target.decode(probe[:size])
            ratios[size] = (time.perf_counter() - started) / step_s
            rows = [target.row_logits(row) for row in range(size)]
            if not all(np.array_equal(row, single) for row, single in zip(rows, singles)):
                worst = max(float(np.max(np.abs(row - single))) for row, single in zip(rows, singles))
                return BatchCheck(size, max((m for m in check_sizes(size) if m < size), default=1), worst, base)
        return BatchCheck(largest, largest, ratios=ratios)
    finally:
        rt.keep_kv_prefix(start)
        target.close()
        sampler.close()


def batch_check(runtime: LlamaRuntime, largest: int, threads: int,
                known: BatchCheck | None = None) -> BatchCheck | None:
    """What is known for batches of up to `largest` tokens, single steps and batches both run on
    `threads` threads (as a drafting turn runs them): `known` or the cached check when it covers
    them, else a new check (remembered on disk). The thread count is part of what is checked:
    with an f16 cache one thread computes the long-context path in one piece and gave batches'
    logits here, two threads split it and did not."""
    for check in (known, cached_check(runtime, threads)):
        if check is not None and check.covers(largest):
            return check
    before = runtime.threads
    runtime.set_threads(threads, threads)
    try:
        check = check_batches(runtime, largest)
    finally:
        runtime.set_threads(*before)
    if check is not None:
        remember(runtime, threads, check)
    return check
