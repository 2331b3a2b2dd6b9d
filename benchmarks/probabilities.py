"""Decode with each token's probabilities on against off (target: at least 0.97x), and what
llama-server's own `n_probs` costs it.

In process: the same turn (same prompt, seed and sampler chain, so the same reply) with
`logprobs` 0 and N, alternating which goes first; decode speed is the reply's tokens over the
wall time from the end of prefill to the end of the turn, so the Python work per token counts.
Prints the median of the paired ratios, and the median cost per token in microseconds.

With --server (or a llama-server started here on the default model, if its programs are
built: chatapp.llama_tools), the same pairs over HTTP, compared by the server's own
`timings.predicted_per_second` (its cost of n_probs) and by the wall clock chatapp sees.

    .venv/bin/python benchmarks/probabilities.py [--runs 10] [--tokens 128] [--logprobs 10] [--server URL|none]
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import time

from chatapp.config import Settings
from chatapp.engine.chat.engine import Engine
from chatapp.engine.events import PrefillDone, TurnDone
from chatapp.engine.machine.hardware import physical_cores
from chatapp.engine.opening import open_engine

PROMPT = "Write a long, detailed story about a lighthouse keeper who finds a message in a bottle."


def run(engine: Engine, tokens: int, logprobs: int) -> tuple[float, float, int, float]:
    """(wall decode tok/s, the backend's own decode tok/s, tokens, wall decode seconds)."""
    engine.clear_cache()
    engine.new_chat()
    engine.set_generation(max_tokens=tokens, logprobs=logprobs, seed=1234)
    prefill_end = end = time.perf_counter()
    for event in engine.send(PROMPT):
        if isinstance(event, PrefillDone):
            prefill_end = time.perf_counter()
        elif isinstance(event, TurnDone):
            end = time.perf_counter()
            record = event.record
    assert (len(record.probs) == record.generated_tokens) if logprobs else not record.probs
    timings = record.extra.get("server_timings") or {}
    own = timings.get("predicted_per_second") or record.decode_tps
    return record.generated_tokens / (end - prefill_end), own, record.generated_tokens, end - prefill_end


def pairs(engine: Engine, runs: int, tokens: int, logprobs: int) -> tuple[list[float], list[float], list[float]]:
    """Paired runs, alternating which goes first: wall ratios, own ratios, per-token cost (us)."""
    run(engine, tokens, logprobs)  # warm-up: caches, the thread policy's first look
    wall, own, cost = [], [], []
    for i in range(runs):
        order = (0, logprobs) if i % 2 == 0 else (logprobs, 0)
        got = {n: run(engine, tokens, n) for n in order}
        off, on = got[0], got[logprobs]
        if off[2] != on[2]:
            raise SystemExit(f"the replies differ in length ({off[2]} and {on[2]} tokens): not a fair pair")
        wall.append(on[0] / off[0])
        own.append(on[1] / off[1])
        cost.append((on[3] - off[3]) / on[2] * 1e6)
        print(f"  pair {i + 1}: {off[0]:.1f} and {on[0]:.1f} tok/s, {wall[-1]:.3f}x", flush=True)
    return wall, own, cost


def step_cost(model: str | None, logprobs: int, settings: Settings, calls: int = 2000) -> tuple[float, float]:
    """The sampling step alone, on one fixed logits row: microseconds per call of the turn's
    sampler (llama_sampler_sample over the whole vocabulary) and of the probing one. Medians of
    5 blocks; a loaded machine moves them less than whole decode steps."""
    from chatapp.engine.local.llama import LlamaRuntime, LoadOptions
    from chatapp.engine.local.probing import ProbingSampler
    from chatapp.engine.models.resolve import resolve_model

    runtime = LlamaRuntime(resolve_model(model), LoadOptions(n_ctx=512))
    try:
        runtime.eval(runtime.tokenize("<|im_start|>user\n" + PROMPT + "<|im_end|>\n<|im_start|>assistant\n",
                                      special=True))
        chain = dict(temperature=settings.temperature, top_k=settings.top_k, top_p=settings.top_p,
                     min_p=settings.min_p, seed=1)
        plain, probing = runtime.sampler(**chain), ProbingSampler(runtime.sampler(**chain), logprobs)
        blocks = {"plain": [], "probing": []}
        for _ in range(5):
            for name, sampler in (("plain", plain), ("probing", probing)):
                start = time.perf_counter()
                for _ in range(calls):
                    sampler.sample()
                blocks[name].append((time.perf_counter() - start) / calls * 1e6)
            probing.taken.clear()
        plain.close()
        probing.close()
        return statistics.median(blocks["plain"]), statistics.median(blocks["probing"])
    finally:
        runtime.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--logprobs", type=int, default=10)
    parser.add_argument("--ctx", type=int, default=2048)
    parser.add_argument("--server", default=None, help="a running llama-server; 'none' to skip (default: start one)")
    args = parser.parse_args()

    settings = Settings(n_ctx=args.ctx, max_tokens=args.tokens, threads=physical_cores())
    plain_us, probing_us = step_cost(args.model, args.logprobs, settings)
    print(f"sampling step alone: {plain_us:.0f} us plain, {probing_us:.0f} us with {args.logprobs} candidates "
          f"(+{probing_us - plain_us:.0f} us a token)", flush=True)
    engine = open_engine(settings, args.model)
    try:
        wall, _own, cost = pairs(engine, args.runs, args.tokens, args.logprobs)
    finally:
        engine.close()
    g = settings
    print(f"in-process · {engine.summary.name} · temperature {g.temperature} top_k {g.top_k} top_p {g.top_p} "
          f"min_p {g.min_p} · logprobs {args.logprobs} · {args.tokens} tokens · {args.runs} pairs")
    print(f"  decode with probabilities / without: median {statistics.median(wall):.3f}x "
          f"(min {min(wall):.3f}, max {max(wall):.3f}; target >= 0.97)")
    print(f"  cost per token (wall, on - off): median {statistics.median(cost):.0f} us")
    if args.server != "none":
        server(args, settings)


def server(args, settings: Settings) -> None:
    from chatapp.llama_tools import built

    with contextlib.ExitStack() as stack:
        url = args.server
        if url is None:
            if not built():
                print("llama-server: not built (python -m chatapp.llama_tools); skipped")
                return
            from remote_speed import local_server

            url = stack.enter_context(local_server(args.ctx))
        from remote_speed import connect

        engine = connect(settings.replace(server=url))
        stack.callback(engine.close)
        wall, own, _cost = pairs(engine, args.runs, args.tokens, args.logprobs)
    print(f"llama-server {url} · n_probs {max(args.logprobs, settings.top_k)} (raw, for the chain's top_k) · "
          f"{args.runs} pairs")
    print(f"  server's own decode tok/s with n_probs / without: median {statistics.median(own):.3f}x "
          f"(min {min(own):.3f}, max {max(own):.3f})")
    print(f"  as chatapp sees it (wall clock): median {statistics.median(wall):.3f}x")


if __name__ == "__main__":
    main()
