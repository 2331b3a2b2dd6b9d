"""Speculative decoding on vs off, paired, and the memory-bandwidth probe against a numpy copy.

Decode tok/s (wall clock, same threads, same runtime) with prompt-lookup drafting on and off, in
pairs whose order alternates, on
  (a) copy-heavy tasks: repeat a paragraph with one word changed; rename a variable in a
      40-line function. Target: on/off >= 1.5x.
  (b) open chat. Target: on/off >= 0.98x (issue 24: drafting must not cost more than 2%).
Greedy by default, where on and off must also give the same reply (printed as "same reply").

Two ways to run it:
  --engine     through Engine turns with settings draft="ngram" / "off", printing what was
               drafted and accepted;
  default      straight on LlamaRuntime: the plain loop (sample, decode one) against
               SpeculativeDecoder with VerifyTarget, which is what the engine runs;
  --same-loop  the same, but "off" is SpeculativeDecoder under a policy that never drafts, so
               the ratio is what the policy's drafts win or lose, and nothing else: separate
               processes (benchmarks/spec_vs_llama_server.py) swing 5-15% a pair on open chat
               here even when neither side drafts a token, too much to resolve a 2% target.

--verify-cost times what drafting's ceiling rests on: one verify batch of k tokens (decode with
logits at every row, then the argmax of each row) against one plain step, after 200 cells. A
step that accepts a tokens yields a + 1 tokens for the cost of its batch, so drafting can only
win where a batch of k costs well under k steps, that is where decode is bound by reading the
weights rather than by computing with them.
The runtime path uses a q8_0 KV cache by default, which turns flash attention on: llama.cpp's
CPU attention without it gives verify batches logits that differ from single steps.

Then the bandwidth probe (chatapp.engine.machine.bandwidth, a threaded numpy max over a buffer 4x the
last-level caches) against a threaded numpy copy of the same buffer, counted as STREAM counts
a copy (bytes read + bytes written). Target: within 15%.

    .venv/bin/python benchmarks/speculative.py [--pairs 5] [--tokens 256] [--engine]
    .venv/bin/python benchmarks/speculative.py --probe-only
    .venv/bin/python benchmarks/speculative.py --drafter-cost
    .venv/bin/python benchmarks/speculative.py --verify-cost [--kv-type q8_0]
    .venv/bin/python benchmarks/speculative.py --ceiling [--draft-max 8]

--ceiling asks llama.cpp's own llama-bench (chatapp.llama_tools) what bounds any drafting on
this machine: a step that verifies k drafts and accepts them all yields k + 1 tokens for one
batch of k + 1, so no drafter, however good, beats the ratio of llama.cpp's prompt speed for a
batch of k + 1 to its generation speed, at the copy tasks' own context depths (a verify batch
also needs logits at every row, which llama-bench's prompt test does not compute, so the true
ceiling is a little lower still).
"""

from __future__ import annotations

import argparse
import dataclasses
import random
import statistics
import time
import timeit
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from chatapp.engine.machine import bandwidth
from chatapp.engine.machine.hardware import physical_cores
from chatapp.engine.drafting.lookup import NgramDrafter

PARAGRAPH = ("The old lighthouse stood on a rocky point at the edge of the bay. Every evening the keeper climbed "
             "the spiral stairs, trimmed the wick and polished the great glass lens until it shone. Ships passing "
             "in the night saw its red beam sweep across the water and knew they were close to home. In winter "
             "the storms came from the north, and the keeper wrote each one into a leather logbook: the hour, the "
             "wind, the height of the waves, and the names of the boats that came in safely.")
FUNCTION = '''def summarize_orders(orders, tax_rate, discounts):
    subtotal = 0
    count = 0
    largest = None
    for order in orders:
        if order.cancelled:
            continue
        price = order.unit_price * order.quantity
        code = order.discount_code
        if code in discounts:
            price = price * (1 - discounts[code])
        subtotal += price
        count += 1
        if largest is None or price > largest:
            largest = price
    tax = subtotal * tax_rate
    total = subtotal + tax
    average = subtotal / count if count else 0
    lines = []
    lines.append(f"orders: {count}")
    lines.append(f"subtotal: {subtotal:.2f}")
    lines.append(f"tax: {tax:.2f}")
    lines.append(f"total: {total:.2f}")
    lines.append(f"average: {average:.2f}")
    if largest is not None:
        lines.append(f"largest: {largest:.2f}")
    report = "\\n".join(lines)
    summary = {
        "count": count,
        "subtotal": subtotal,
        "tax": tax,
        "total": total,
        "average": average,
        "largest": largest,
        "report": report,
    }
    if count == 0:
        summary["note"] = "no orders"
    return summary
'''
TASKS = {
    "copy": [
        f"Repeat the following paragraph exactly, changing only the word 'red' to 'green':\n\n{PARAGRAPH}",
        f"Rename the variable `subtotal` to `net_amount` in this function and show the whole function:\n\n{FUNCTION}",
    ],
    "chat": [
        "Tell me about the history of tea and how it spread around the world.",
        "Write a short story about a robot who learns to paint.",
        "What are some good habits for staying healthy while working from home?",
    ],
}
TARGETS = {"copy": 1.5, "chat": 0.98}


# --- decode tok/s, drafting on and off -----------------------------------------------------------
class RuntimeBench:
    """The plain loop and the speculative step machine on one LlamaRuntime."""

    def __init__(self, path, threads: int, kv_type: str, n_ctx: int, draft_max: int | None = None,
                 same_loop: bool = False):
        from chatapp.engine.local.drafting import LocalDrafting
        from chatapp.engine.local.llama import LlamaRuntime, LoadOptions

        self.rt = LlamaRuntime(path, LoadOptions(n_ctx=n_ctx, n_threads=threads, kv_type=kv_type))
        # The engine's own drafting state: its drafter and policy carry over from run to run, and
        # the policy starts from the figures the last drafted process kept and the exactness
        # check's batch costs and sizes, as in the engine.
        self.drafting = LocalDrafting(self.rt)
        self.draft_max = draft_max or 8
        self.same_loop = same_loop
        self.last: dict = {}
        """The drafted run's figures, for the table."""

    def _prompt(self, text: str) -> list[int]:
        messages = [{"role": "user", "content": text}]
        if self.same_loop:  # as chatapp sends it, so that replies are the app's (and spec_vs_llama_server's)
            from chatapp.config import Settings

            messages.insert(0, {"role": "system", "content": Settings().system_prompt})
        rendered = self.rt.render_chat(messages, add_generation_prompt=True)
        return self.rt.tokenize(rendered, special=True)

    def run(self, text: str, draft: bool, tokens: int, temperature: float, seed: int) -> tuple[float, list[int]]:
        from chatapp.engine.backend import Drafting
        from chatapp.engine.drafting.policy import DraftPolicy
        from chatapp.engine.local.llama import VerifyTarget
        from chatapp.engine.drafting.speculative import SpeculativeDecoder

        rt = self.rt
        ids = self._prompt(text)
        rt.clear_kv()
        rt.eval(ids)
        sampler = rt.sampler(temperature=temperature, seed=seed)
        out: list[int] = []
        start = time.perf_counter()
        if not draft and not self.same_loop:
            while len(out) < tokens:
                token = sampler.sample()
                if rt.is_end_of_generation(token):
                    break
                out.append(token)
                rt.eval([token])
        else:
            if draft:
                decoder, target = self.drafting.decoder(sampler, Drafting("ngram", self.draft_max))
            else:  # no speed-up is ever worth an infinite margin: the same loop, drafting nothing
                target = VerifyTarget(rt, sampler, capacity=self.draft_max + 1)
                decoder = SpeculativeDecoder(target, rt.is_end_of_generation,
                                             policy=DraftPolicy(k_max=self.draft_max, margin=float("inf")))
                decoder.begin(ids)
            while len(out) < tokens:
                step = decoder.step(tokens - len(out), rt.n_ctx - rt.n_cached)
                out.extend(step.tokens[:-1] if step.ended else step.tokens)
                if step.ended or step.full:
                    break
            target.close()
            if draft:
                stats = decoder.stats
                self.last = {"draft_tokens": stats.drafted, "draft_accepted": stats.accepted,
                             "decode_steps": stats.steps}
        elapsed = time.perf_counter() - start
        sampler.close()
        return len(out) / elapsed if elapsed > 0 else 0.0, out


class EngineBench:
    """Whole turns through Engine, drafting set in the settings (after the engine wiring)."""

    def __init__(self, path, threads: int, kv_type: str, n_ctx: int, draft_max: int | None = None):
        from chatapp.config import Settings
        from chatapp.engine.opening import open_engine

        if "draft" not in {f.name for f in dataclasses.fields(Settings)}:
            raise SystemExit("speculation is not wired into the engine yet (Settings has no 'draft'); "
                             "run without --engine to measure the runtime path")
        base = Settings(n_ctx=n_ctx, threads=threads, kv_type=kv_type)
        if draft_max:
            base = base.replace(draft_max=draft_max)
        self.engines = {mode: open_engine(base.replace(draft=mode), str(path)) for mode in ("ngram", "off")}
        drafting = self.engines["ngram"].drafting
        if not drafting.active:
            raise SystemExit(f"drafting cannot run here: {drafting.off_because}")
        self.last: dict = {}
        """The drafted turn's record figures, for the table."""

    def run(self, text: str, draft: bool, tokens: int, temperature: float, seed: int) -> tuple[float, list[int]]:
        from chatapp.engine.events import PrefillDone, TurnDone

        engine = self.engines["ngram" if draft else "off"]
        engine.clear_cache()
        engine.new_chat()
        engine.set_generation(max_tokens=tokens, temperature=temperature, seed=seed)
        prefill_end = end = None
        record = None
        for event in engine.send(text):
            if isinstance(event, PrefillDone):
                prefill_end = time.perf_counter()
            elif isinstance(event, TurnDone):
                end, record = time.perf_counter(), event.record
        reply = engine.cached_tokens()[-record.generated_tokens:] if record.generated_tokens else []
        if draft:
            self.last = record.extra
        return record.generated_tokens / (end - prefill_end), reply


def paired(bench, pairs: int, tokens: int, temperature: float, categories=tuple(TASKS)) -> None:
    print(f"{'task':6} {'prompt':42} {'off tok/s':>10} {'on tok/s':>10} {'on/off':>7}  same reply")
    for category, prompts in TASKS.items():
        if category not in categories:
            continue
        ratios = []
        for prompt in prompts:
            mine = []
            for i in range(pairs):
                order = (False, True) if i % 2 == 0 else (True, False)
                result = {draft: bench.run(prompt, draft, tokens, temperature, seed=1 + i) for draft in order}
                (off, off_reply), (on, on_reply) = result[False], result[True]
                ratio = on / off if off else 0.0
                ratios.append(ratio)
                mine.append(ratio)
                label = prompt.splitlines()[0][:40]
                figures = getattr(bench, "last", {})
                drafted = (f"  accepted {figures['draft_accepted']}/{figures['draft_tokens']}, "
                           f"{len(on_reply) / max(figures['decode_steps'], 1):.2f} tokens/step"
                           if figures.get("draft_tokens") is not None else "")
                print(f"{category:6} {label:42} {off:10.1f} {on:10.1f} {ratio:7.3f}  {on_reply == off_reply}{drafted}")
            print(f"{category:6} {label:42} median on/off {statistics.median(mine):.3f} over {len(mine)} pairs")
        geo = float(np.exp(np.mean(np.log(np.maximum(ratios, 1e-9)))))
        verdict = "meets" if geo >= TARGETS[category] else "MISSES"
        print(f"{category}: on/off geometric mean {geo:.3f}, median {statistics.median(ratios):.3f} over "
              f"{len(ratios)} pairs; {verdict} the target of {TARGETS[category]}x\n")


# --- the bandwidth probe against a numpy copy --------------------------------------------------
def copy_gbps(threads: int, size: int, passes: int = 5) -> float:
    """A threaded numpy copy of `size` bytes, counted as bytes read + bytes written (STREAM's copy)."""
    n = size // 8 // threads * threads
    src, dst = np.ones(n), np.zeros(n)
    pairs = list(zip(np.array_split(src, threads), np.array_split(dst, threads)))
    best = float("inf")
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(lambda p: np.copyto(p[1], p[0]), pairs))  # map the pages first
        for _ in range(passes):
            start = time.perf_counter()
            list(pool.map(lambda p: np.copyto(p[1], p[0]), pairs))
            best = min(best, time.perf_counter() - start)
    return 2 * src.nbytes / best / 1e9


def probe_vs_copy(threads: int, rounds: int) -> None:
    size = bandwidth.buffer_size()
    print(f"bandwidth: {threads} threads, {size >> 20} MiB buffers, {rounds} rounds")
    ratios = []
    for _ in range(rounds):
        probe = bandwidth.measure(threads, size)
        copy = copy_gbps(threads, size)
        ratios.append(probe.gbps / copy)
        print(f"  probe {probe.gbps:6.1f} GB/s in {probe.seconds:.2f} s   numpy copy {copy:6.1f} GB/s (read + write)"
              f"   probe/copy {probe.gbps / copy:.3f}")
    median = statistics.median(ratios)
    verdict = "within" if abs(median - 1) <= 0.15 else "NOT within"
    print(f"probe/copy median {median:.3f}: {verdict} 15%\n")


def drafter_cost() -> None:
    rng = random.Random(1)
    for size in (100, 8192):
        context = [rng.randrange(2000) for _ in range(size)]
        build = timeit.timeit(lambda: NgramDrafter(context), number=5) / 5
        drafter = NgramDrafter(context)
        n = 50_000
        tokens = [rng.randrange(2000) for _ in range(n)]
        it = iter(tokens)
        append = timeit.timeit(lambda: drafter.append(next(it)), number=n) / n
        draft = timeit.timeit(lambda: drafter.draft(8), number=n) / n
        print(f"drafter at {size:5} tokens: build {build * 1e3:.2f} ms, append {append * 1e6:.2f} us, "
              f"draft(8) {draft * 1e6:.2f} us")


def verify_cost(path, threads: int, kv_type: str, rounds: int = 30) -> None:
    from chatapp.engine.local.llama import LlamaRuntime, LoadOptions, VerifyTarget

    rt = LlamaRuntime(path, LoadOptions(n_ctx=1024, n_threads=threads, n_threads_batch=threads, kv_type=kv_type))
    ids = rt.tokenize(PARAGRAPH * 4, special=False)
    rt.eval(ids[:200])
    target = VerifyTarget(rt, rt.sampler(temperature=0.0, seed=1), capacity=33)
    print(f"{path.name}, {threads} threads, KV {kv_type}: one verify batch against one plain step, after 200 cells")
    single = None
    for size in (1, 2, 3, 5, 9, 13, 17, 25, 33):
        times = []
        for _ in range(rounds):
            start = time.perf_counter()
            target.decode(ids[200:200 + size])
            for row in range(size) if size > 1 else (-1,):
                target.sample(row)
            times.append(time.perf_counter() - start)
            target.truncate(200)
        cost = statistics.median(times)
        single = single or cost
        print(f"  {size} token{'s' if size > 1 else ' '}  {cost * 1e3:6.2f} ms  = {cost / single:4.2f} steps")
    rt.close()


def ceiling(path, threads: int, kv_type: str, draft_max: int) -> None:
    import json
    import subprocess

    from chatapp.llama_tools import ensure_tools

    runtime = RuntimeBench(path, threads, kv_type, n_ctx=1024)  # the prompts as the paired runs build them
    depths = {text.split(":")[0][:40]: len(runtime._prompt(text)) for text in TASKS["copy"]}
    runtime.rt.close()
    bench = ensure_tools() / "llama-bench"
    sizes = sorted({draft_max + 1, 9, 17})
    print(f"{path.name}, {threads} threads, KV {kv_type}, flash attention on: llama-bench, prompt t/s for a batch "
          "against generation t/s, at each copy task's prompt length")
    for task, depth in depths.items():
        command = [str(bench), "-m", str(path), "-t", str(threads), "-fa", "1", "-ctk", kv_type, "-ctv", kv_type,
                   "-p", ",".join(map(str, sizes)), "-n", "32", "-d", str(depth), "-r", "5", "-o", "json"]
        rows = json.loads(subprocess.run(command, capture_output=True, text=True, check=True).stdout)
        generation = next(r["avg_ts"] for r in rows if r["n_gen"] > 0)
        for row in (r for r in rows if r["n_prompt"] > 0):
            m = row["n_prompt"]
            print(f"  {task:<40} depth {depth:4d}: batch of {m:2d} {row['avg_ts']:6.1f} t/s, generation "
                  f"{generation:5.1f} t/s: {m - 1:2d} drafts all accepted gain at most "
                  f"{row['avg_ts'] / generation:.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None)
    parser.add_argument("--pairs", type=int, default=5, help="Pairs of runs per prompt.")
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--temperature", type=float, default=0.0)
    parser.add_argument("--threads", type=int, default=0, help="0: one per physical core.")
    parser.add_argument("--kv-type", default="q8_0")
    parser.add_argument("--ctx", type=int, default=4096)
    parser.add_argument("--engine", action="store_true", help="Through Engine turns.")
    parser.add_argument("--same-loop", action="store_true",
                        help="Off runs the drafting loop with a policy that never drafts (runtime path).")
    parser.add_argument("--tasks", default="copy,chat", help="copy, chat or both, comma-separated.")
    parser.add_argument("--probe-only", action="store_true")
    parser.add_argument("--probe-rounds", type=int, default=5)
    parser.add_argument("--drafter-cost", action="store_true")
    parser.add_argument("--verify-cost", action="store_true")
    parser.add_argument("--ceiling", action="store_true", help="llama-bench's bound on any drafting here.")
    parser.add_argument("--draft-max", type=int, default=None,
                        help="Drafts a step may verify (default: the config's default).")
    args = parser.parse_args()
    threads = args.threads or physical_cores()

    if args.drafter_cost:
        drafter_cost()
        return
    if args.verify_cost:
        from chatapp.engine.models.resolve import resolve_model

        verify_cost(resolve_model(args.model), threads, args.kv_type)
        return
    if args.ceiling:
        from chatapp.config import Settings
        from chatapp.engine.models.resolve import resolve_model

        ceiling(resolve_model(args.model), threads, args.kv_type, args.draft_max or Settings().draft_max)
        return
    if not args.probe_only:
        from chatapp.engine.models.resolve import resolve_model

        path = resolve_model(args.model)
        if args.engine and args.same_loop:
            raise SystemExit("--same-loop runs on the runtime path; leave out --engine")
        bench = (EngineBench(path, threads, args.kv_type, args.ctx, args.draft_max) if args.engine else
                 RuntimeBench(path, threads, args.kv_type, args.ctx, args.draft_max, same_loop=args.same_loop))
        loop = "engine turns" if args.engine else "runtime loop" + (", off = never drafting" if args.same_loop else "")
        print(f"{path.name}, {threads} threads, KV {args.kv_type}, temperature {args.temperature}, "
              f"{args.tokens} tokens, {loop}\n")
        paired(bench, args.pairs, args.tokens, args.temperature, args.tasks.split(","))
    probe_vs_copy(threads, args.probe_rounds)


if __name__ == "__main__":
    main()
