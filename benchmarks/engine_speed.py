"""Engine end-to-end prefill and decode tok/s against a bare llama-cpp-python loop.

Both sides load the same model with the same threads and context, run the same templated
prompt (same context depth), and decode the same number of greedy tokens. Wall-clock time
is used on both sides, so the engine's Python overhead (events, UTF-8 streaming, stats) counts.

    .venv/bin/python benchmarks/engine_speed.py [--model PATH] [--runs 10] [--tokens 128]
"""

from __future__ import annotations

import argparse
import statistics
import time

from llama_cpp import Llama

from chatapp.config import Settings
from chatapp.engine.chat.engine import Engine
from chatapp.engine.opening import open_engine
from chatapp.engine.events import PrefillDone, TurnDone
from chatapp.engine.machine.hardware import physical_cores
from chatapp.engine.local.llama import silence_llama_logs
from chatapp.engine.models.resolve import resolve_model

PROMPT = "Write a long, detailed story about a lighthouse keeper who finds a message in a bottle."


def engine_run(engine: Engine, tokens: int) -> tuple[float, float, int, list[int], int]:
    engine.clear_cache()
    engine.new_chat()
    engine.set_generation(max_tokens=tokens)
    start = time.perf_counter()
    for event in engine.send(PROMPT):
        if isinstance(event, PrefillDone):
            prefill_end = time.perf_counter()
            prompt_tokens = event.prompt_tokens
        elif isinstance(event, TurnDone):
            end = time.perf_counter()
            record = event.record
    prompt_ids = engine.cached_tokens()[:prompt_tokens]
    prefill_tps = prompt_tokens / (prefill_end - start)
    decode_tps = record.generated_tokens / (end - prefill_end)
    return prefill_tps, decode_tps, record.generated_tokens, prompt_ids, record.decode_tokens


def bare_run(llm: Llama, prompt_ids: list[int], n_decode: int) -> tuple[float, float]:
    llm.reset()
    start = time.perf_counter()
    llm.eval(prompt_ids)
    prefill_end = time.perf_counter()
    for _ in range(n_decode):
        token = llm.sample(temp=0.0)
        llm.eval([token])
    end = time.perf_counter()
    return len(prompt_ids) / (prefill_end - start), n_decode / (end - prefill_end)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--ctx", type=int, default=2048)
    args = parser.parse_args()

    path = resolve_model(args.model)
    threads = physical_cores()
    settings = Settings(n_ctx=args.ctx, temperature=0.0, max_tokens=args.tokens, threads=threads)
    engine = open_engine(settings, str(path))
    silence_llama_logs()
    bare = Llama(str(path), n_ctx=args.ctx, n_batch=512, n_ubatch=512, n_threads=threads,
                 n_threads_batch=threads, flash_attn=settings.flash_attn, verbose=False)

    rows = {"engine": [], "bare": []}
    for _ in range(args.runs):
        e_prefill, e_decode, generated, prompt_ids, _ = engine_run(engine, args.tokens)
        b_prefill, b_decode = bare_run(bare, prompt_ids, generated)
        rows["engine"].append((e_prefill, e_decode))
        rows["bare"].append((b_prefill, b_decode))

    def median(side: str, i: int) -> float:
        return statistics.median(r[i] for r in rows[side])

    def paired(i: int) -> float:
        """The median of each run's engine/bare ratio: the two sides of a run ran back to back,
        so the machine's drift in speed from run to run cancels out."""
        return statistics.median(e[i] / b[i] for e, b in zip(rows["engine"], rows["bare"]))

    print(f"model {path.name} · threads {threads} · n_ctx {args.ctx} · prompt {len(prompt_ids)} tok · "
          f"decode {generated} tok · {args.runs} runs (medians)")
    print(f"{'':8} {'prefill tok/s':>14} {'decode tok/s':>13}")
    for side in ("bare", "engine"):
        print(f"{side:8} {median(side, 0):14.1f} {median(side, 1):13.1f}")
    print(f"engine/bare, median of the runs' ratios: prefill {paired(0):.1%}, decode {paired(1):.1%} "
          f"(target decode >= 95%)")
    engine.close()
    bare.close()


if __name__ == "__main__":
    main()
