"""The draft policy replayed without timing noise: how many steps and how much modeled time each
copy task's reply takes, cold, at each draft_max (issue 36).

On this shared 2-core machine one process's decode speed swings by a quarter, so paired runs of
fresh processes need many rounds to tell 3% apart, and a cold policy's choices follow its own
timings, so the same settings take different steps from run to run. Greedy replies do not
depend on drafting, so this script decodes each task's reply once, plainly, with the real model
(2 threads, q8_0 cache, flash attention, as spec_vs_llama_server.py), and times verify batches of
1 to 65 tokens at the reply's depth. It then runs chatapp's own SpeculativeDecoder, NgramDrafter
and DraftPolicy, as a fresh home's first process has them (no figures restored, the exactness
check's sizes), over a target that answers with the recorded reply and charges each step the
timed cost of its batch, scaled by lognormal noise (`--noise`, one seed per repeat) so that the
choices that follow from timings are sampled as a real run's are. Alongside, llama-server's
ngram-simple (12-token match, 48-token drafts, common/ngram-map.cpp) under the same costs.

With `--warm`, each task's process starts as a warm home's does: from the acceptance the process
before it left (`DraftPolicy.learned`, capped on restore) and from the exactness check's batch
costs; the tasks run twice in a row and the second pass is shown. To replay older code, run the
script with PYTHONPATH set to a worktree of that commit.

    .venv/bin/python benchmarks/draft_replay.py [--draft-max 32,48] [--repeats 20] [--noise 0.08] [--warm]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from spec_vs_llama_server import CHAT, COPY

from chatapp.config import Settings
from chatapp.engine.drafting.lookup import NgramDrafter
from chatapp.engine.drafting.policy import DraftPolicy
from chatapp.engine.drafting.speculative import SpeculativeDecoder
from chatapp.engine.events import TurnDone
from chatapp.engine.local.exact_batches import check_sizes
from chatapp.engine.local.llama import VerifyTarget
from chatapp.engine.opening import open_engine

TOKENS = 256
STEP_OVERHEAD_MS = 0.3
"""The Python around a step outside llama_decode (profiled: 0.2-0.5 ms)."""


def record(tokens: int) -> tuple[dict[str, tuple[list[int], list[int], bool]], dict[int, float], int]:
    """Per task (prompt ids, reply ids, ended by an end token), the median ms of a batch of m
    tokens (1-65) at the paragraph reply's depth, and the end-of-generation token."""
    engine = open_engine(Settings(threads=2, kv_type="q8_0", draft="off", flash_attn="on", n_ctx=4096))
    engine.set_generation(max_tokens=tokens, temperature=0.0)
    runtime = engine._backend.runtime
    replies = {}
    for name, text in {**COPY, **CHAT}.items():
        engine.new_chat()
        done = next(e.record for e in engine.send(text) if isinstance(e, TurnDone))
        cached = list(runtime.kv_tokens)
        reply = cached[done.prompt_tokens:]
        replies[name] = (cached[:done.prompt_tokens], reply, done.generated_tokens < tokens)
    engine.new_chat()
    list(engine.send(COPY["paragraph"]))
    target = VerifyTarget(runtime, runtime.sampler(temperature=0.0), capacity=65)
    base, context = runtime.n_cached, list(runtime.kv_tokens)
    timed: dict[int, list[float]] = {}
    for _ in range(7):
        for m in range(1, 66):
            started = time.perf_counter()
            target.decode(context[-m:])
            for row in range(m if m > 1 else 0):
                target.sample(row)
            timed.setdefault(m, []).append((time.perf_counter() - started) * 1000)
            target.truncate(base)
    end = runtime.tokenize("<|im_end|>", special=True)[0]  # the default model's end of turn
    target.close()
    engine.close()
    return replies, {m: statistics.median(v) for m, v in timed.items()}, end


class ReplayTarget:
    """The model side of SpeculativeDecoder, answering with the recorded reply."""

    def __init__(self, sequence: list[int], prompt: int, end: int, cost, clock):
        self.sequence, self.end, self.cost, self.clock = sequence, end, cost, clock
        self.n_cached = prompt
        self._last = (prompt - 1, 1)  # the prefill's last row predicts the first reply token

    def decode(self, tokens) -> None:
        self.clock.now += self.cost(len(tokens))
        self._last = (self.n_cached, len(tokens))
        self.n_cached += len(tokens)

    def sample(self, row: int) -> int:
        start, size = self._last
        at = start + (row if row >= 0 else size - 1) + 1
        return self.sequence[at] if at < len(self.sequence) else self.end

    def truncate(self, n: int) -> None:
        self.n_cached = n


class Clock:
    now = 0.0

    def __call__(self) -> float:
        self.now += STEP_OVERHEAD_MS / 2  # called at a step's start and end
        return self.now / 1000


def chatapp(prompt, reply, ended, end, costs, draft_max, rng, noise, learned=None) -> tuple[float, int, dict]:
    """One process's turn; `learned`: what the process before it left (None: a fresh home)."""
    sequence = prompt + reply + ([end] if ended else [])
    clock = Clock()
    cost = lambda m: costs[m] * rng.lognormvariate(0, noise)  # noqa: E731
    policy = DraftPolicy(k_max=draft_max)
    policy.sizes = frozenset(check_sizes(draft_max + 1))  # the check's sizes; cold, no figures
    if learned is not None:  # warm: the file an earlier process wrote, and the check's timings
        policy.restore(learned)
        policy.seed({m: costs[m] / costs[1] for m in check_sizes(draft_max + 1)})
    decoder = SpeculativeDecoder(ReplayTarget(sequence, len(prompt), end, cost, clock), lambda t: t == end,
                                 drafter=NgramDrafter(), policy=policy, clock=clock)
    decoder.begin(prompt)
    emitted = steps = 0
    while emitted < len(reply) + ended:
        step = decoder.step(TOKENS - emitted, 1 << 20)
        emitted, steps = emitted + len(step.tokens), steps + 1
        if step.ended:
            break
    return clock.now, steps, policy.learned()


def ngram_simple(prompt, reply, ended, end, costs, rng, noise, n=12, m=48) -> tuple[float, int]:
    """llama-server's ngram-simple: the last n tokens (the sampled one last) found earlier in the
    context propose the m that followed them (common_ngram_simple_draft)."""
    sequence = prompt + reply + ([end] if ended else [])
    cached, ms, steps = len(prompt), 0.0, 0
    while cached < len(sequence) and sequence[cached] != end and cached - len(prompt) < TOKENS:
        context, pattern = sequence[:cached], sequence[cached - n + 1:cached + 1]
        draft = []
        if cached > n + m + 1:
            for j in range(cached - n - 1, 0, -1):
                if context[j:j + n] == pattern:
                    size = min(m, cached - (j + n))
                    draft = context[j + n:j + n + size] if size >= n else []
                    break
        kept = 0
        while kept < len(draft) and cached + 1 + kept < len(sequence) and sequence[cached + 1 + kept] == draft[kept]:
            kept += 1
        ms += costs[1 + len(draft)] * rng.lognormvariate(0, noise) + STEP_OVERHEAD_MS
        cached, steps = cached + 1 + kept, steps + 1
    return ms, steps


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--draft-max", default="32,48", help="draft_max values, comma-separated")
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--noise", type=float, default=0.08, help="sigma of each step's lognormal time noise")
    parser.add_argument("--warm", action="store_true",
                        help="Each task's process starts from what the one before it learned, and from the "
                             "check's batch costs: the tasks run twice in a row and the second pass is shown.")
    args = parser.parse_args()
    sizes = [int(x) for x in args.draft_max.split(",")]
    replies, costs, end = record(TOKENS)
    print("batch cost in single steps: " + ", ".join(f"{m}: {costs[m] / costs[1]:.2f}"
                                                     for m in (2, 5, 9, 17, 25, 33, 49, 65)))
    passes = 2 if args.warm else 1
    runs: dict[str, dict[str, list]] = {task: {} for task in replies}
    for size in sizes:
        for seed in range(args.repeats):
            rng, learned = random.Random(seed), {} if args.warm else None
            for done in range(passes):
                for task, (prompt, reply, ended) in replies.items():
                    ms, steps, left = chatapp(prompt, reply, ended, end, costs, size, rng, args.noise, learned)
                    learned = left if args.warm else None
                    if done == passes - 1:
                        runs[task].setdefault(f"chatapp@{size}", []).append((ms, steps))
    first = f"chatapp@{sizes[0]}"
    for task, (prompt, reply, ended) in replies.items():
        rngs = [random.Random(seed) for seed in range(args.repeats)]
        runs[task]["server-ngram-simple"] = [ngram_simple(prompt, reply, ended, end, costs, r, args.noise)
                                             for r in rngs]
        mean = {name: statistics.mean(ms for ms, _ in r) for name, r in runs[task].items()}
        tokens = len(reply) + ended
        print(f"{task:10} {tokens:3d} tok: " + "; ".join(
            f"{name} {tokens / mean[name] * 1000:6.1f} tok/s, {statistics.mean(s for _, s in r):5.1f} steps, "
            f"{mean[first] / mean[name]:.3f}x" for name, r in runs[task].items()))


if __name__ == "__main__":
    main()
