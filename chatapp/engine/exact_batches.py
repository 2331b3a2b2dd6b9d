"""Whether a verify batch gives exactly a single step's logits, for this model, build and machine.

Drafting keeps replies byte for byte what plain decoding gives only if row i of a batch of m
tokens holds the very logits that decoding those tokens one at a time gives. Whether it does
is up to llama.cpp's kernels, which may change with the batch size. Measured on the development
machine (ggml 0.25.3, x86-64 AVX2, flash attention on): SmolLM2-135M Q4_1 gave identical rows
at every size checked, while gemma-3-270m Q4_K_M differed at 2 tokens already, by up to 0.65 in
a logit (its Q4_K weights are repacked for batched products; loaded without repacking it was
exact up to 5 tokens and differed at 10). So the engine checks rather than assumes.

The check decodes fixed texts (prose, then code) after whatever the cache holds: `largest`
tokens one at a time, keeping each step's logits, then as one batch of every size from 2 to
`largest`, comparing row by row, bit for bit. It stops at the first size that differs, removes
every cell it added (the cache ends as it began) and is cached per model file, llama.cpp build,
CPU, KV type, flash attention and offload: about a second on the default model here, once.
Passing is evidence, not proof: it is two texts at two lengths. On the default model the
tests also compare whole greedy replies with and without drafts.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from chatapp.engine.filecache import FileCache
from chatapp.engine.hardware import cpu_name
from chatapp.engine.llama import LlamaRuntime, VerifyTarget, versions

PROSE = ("The old lighthouse stood on a rocky point at the edge of the bay. Every evening the keeper "
         "climbed the spiral stairs, trimmed the wick and polished the great glass lens until it shone. "
         "Ships passing in the night saw its beam sweep across the water and knew they were close to home. ")
CODE = ("def summarize(orders, tax_rate):\n    subtotal = sum(o.price * o.quantity for o in orders)\n"
        "    tax = subtotal * tax_rate\n    return {'subtotal': subtotal, 'tax': tax, 'total': subtotal + tax}\n")
ROUNDS = ((PROSE, 64), (CODE, 192))
"""(text, cells the checked tokens attend to at least): whether a batch matches single steps can
change with the text and the attended length (on gemma-3-270m the first size that differed moved
between 3 and 8), so two different ones are checked."""
CACHE = "verify_batches"


@dataclass(frozen=True)
class BatchCheck:
    checked: int
    """The largest batch size looked at."""
    exact: int
    """Every size from 2 to this gave single steps' logits exactly (1: not even 2 tokens did)."""
    worst: float = 0.0
    """The largest logit difference at the first size that differed (0.0 when none did)."""

    @property
    def passed(self) -> bool:
        """Every size checked gave single steps' logits exactly."""
        return self.exact == self.checked

    def covers(self, size: int) -> bool:
        """Whether this check answers for batches of up to `size` tokens (a failure answers for all)."""
        return self.checked >= size or not self.passed


def settings_key(runtime: LlamaRuntime) -> str:
    info = runtime.info
    return (f"{versions()['llama.cpp']}|{cpu_name()}|{info.backend}|layers {info.layers_offloaded}|"
            f"{info.kv_type}|flash_attn {info.flash_attn}")


def cached_check(runtime: LlamaRuntime) -> BatchCheck | None:
    entry = FileCache(CACHE).get(runtime.path)
    found = entry.get(settings_key(runtime)) if isinstance(entry, dict) else None
    try:
        return BatchCheck(**found) if isinstance(found, dict) else None
    except TypeError:
        return None


def remember(runtime: LlamaRuntime, check: BatchCheck) -> None:
    cache = FileCache(CACHE)
    entry = cache.get(runtime.path)
    cache.put(runtime.path, {**(entry if isinstance(entry, dict) else {}), settings_key(runtime): asdict(check)})


def check_batches(runtime: LlamaRuntime, largest: int) -> BatchCheck | None:
    """Check batches of 2 to `largest` tokens now (see the module docstring), in each round the
    context has room for after what it holds; None when it has room for none."""
    done = None
    for text, fill in ROUNDS:
        check = _check_round(runtime, largest, text, fill)
        if check is not None and check.exact < check.checked:
            return check
        done = check or done
    return done


def _check_round(rt: LlamaRuntime, largest: int, text: str, fill: int) -> BatchCheck | None:
    start = rt.n_cached
    tokens = rt.tokenize(text * (1 + (fill + largest) // 40), special=False)
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
        singles = []
        for token in probe:
            target.decode([token])
            singles.append(target.row_logits(-1))
        for size in range(2, largest + 1):
            rt.keep_kv_prefix(base)
            target.decode(probe[:size])
            rows = [target.row_logits(row) for row in range(size)]
            if not all(np.array_equal(row, single) for row, single in zip(rows, singles)):
                worst = max(float(np.max(np.abs(row - single))) for row, single in zip(rows, singles))
                return BatchCheck(size, size - 1, worst)
        return BatchCheck(largest, largest)
    finally:
        rt.keep_kv_prefix(start)
        target.close()
        sampler.close()


def batch_check(runtime: LlamaRuntime, largest: int, known: BatchCheck | None = None) -> BatchCheck | None:
    """What is known for batches of up to `largest` tokens: `known` or the cached check when it
    covers them, else a new check (remembered on disk)."""
    for check in (known, cached_check(runtime)):
        if check is not None and check.covers(largest):
            return check
    check = check_batches(runtime, largest)
    if check is not None:
        remember(runtime, check)
    return check
