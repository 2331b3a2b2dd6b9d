"""Decode with a JSON schema against without it (target: at least 0.8x), the grammar's own time
per token, and how many of the fixed set's replies are valid (target: all).

In process, the default model and sampler settings, a fixed seed: the same story question with
the reply kept to `{"story": string of 300+ characters}` and free, alternating which goes first; decode speed is
the reply's tokens over the wall time from the end of prefill to the end of the turn, so the
grammar's work per token counts. Prints each pair, the median of the paired ratios, and the
grammar's milliseconds per token as the turn records them (`grammar_ms_per_token`). Then the
same pairs with the mask counted on every token (`--grammar-mask`), which is what showing it
costs. Then the fixed set of tests/engine/local/schemas.json, greedy, as the tests run it.

    .venv/bin/python benchmarks/schema.py [--runs 5] [--tokens 128] [--threads N]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

from chatapp.config import Settings
from chatapp.engine.chat.engine import Engine
from chatapp.engine.events import PrefillDone, TurnDone
from chatapp.engine.machine.hardware import physical_cores
from chatapp.engine.opening import open_engine
from chatapp.engine.shape import ReplyShape

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.engine.local.schema_set import SCHEMAS

PROMPT = "Write a long, detailed story about a lighthouse keeper who finds a message in a bottle."
STORY = ReplyShape(schema={"type": "object", "properties": {"story": {"type": "string", "minLength": 300}},
                           "required": ["story"]})
"""A story of 300 characters or more: the reply runs to --tokens as the free one does (without
minLength the model closes the string after about 17 tokens), so both rates are over as many."""


def run(engine: Engine, tokens: int, shape: ReplyShape | None, mask: bool = False) -> tuple[float, int, dict]:
    """(wall decode tok/s, tokens, the record's extra)."""
    engine.clear_cache()
    engine.new_chat()
    engine.set_generation(max_tokens=tokens, seed=1234, shape=shape, grammar_mask=mask)
    prefill_end = end = time.perf_counter()
    for event in engine.send(PROMPT):
        if isinstance(event, PrefillDone):
            prefill_end = time.perf_counter()
        elif isinstance(event, TurnDone):
            end = time.perf_counter()
            record = event.record
    return record.generated_tokens / (end - prefill_end), record.generated_tokens, record.extra


def pairs(engine: Engine, runs: int, tokens: int, mask: bool) -> tuple[list[float], list[float]]:
    """Paired runs, alternating which goes first: ratios (schema / free) and grammar ms a token."""
    ratios, grammar = [], []
    for i in range(runs):
        order = ("free", "schema") if i % 2 == 0 else ("schema", "free")
        got = {name: run(engine, tokens, STORY if name == "schema" else None, mask) for name in order}
        (free, n_free, _), (shaped, n_shaped, extra) = got["free"], got["schema"]  # a reply cut at --tokens is
        # not valid JSON: these pairs measure speed; the fixed set below measures validity
        ratios.append(shaped / free)
        grammar.append(extra["grammar_ms_per_token"])
        print(f"  pair {i + 1}: free {free:.1f} tok/s ({n_free} tok), schema {shaped:.1f} tok/s ({n_shaped} tok, "
              f"valid {extra['schema_valid']}), {ratios[-1]:.3f}x, grammar {grammar[-1]:.3f} ms/token",
              flush=True)
    return ratios, grammar


def fixed_set(engine: Engine, tokens: int = 64) -> tuple[int, list[float]]:
    """Valid replies of the fixed set, greedy, and each turn's grammar ms a token."""
    valid, grammar = 0, []
    engine.set_generation(temperature=0.0, grammar_mask=False)
    for case in SCHEMAS:
        engine.new_chat()
        engine.set_generation(max_tokens=tokens, shape=ReplyShape(schema=case["schema"]))
        record = [e for e in engine.send(case["ask"]) if isinstance(e, TurnDone)][-1].record
        valid += bool(record.extra.get("schema_valid")) and record.finish_reason == "stop"
        grammar.append(record.extra["grammar_ms_per_token"])
    return valid, grammar


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--threads", type=int, default=physical_cores())
    parser.add_argument("--ctx", type=int, default=2048)
    args = parser.parse_args()

    settings = Settings(n_ctx=args.ctx, max_tokens=args.tokens, threads=args.threads)
    engine = open_engine(settings, args.model)
    try:
        run(engine, args.tokens, STORY)  # warm-up: caches, the thread policy's first look
        g = settings
        print(f"in-process · {engine.summary.name} · {args.threads} threads · temperature {g.temperature} "
              f"top_k {g.top_k} top_p {g.top_p} min_p {g.min_p} · seed 1234 · {args.tokens} tokens · "
              f"{args.runs} pairs")
        ratios, grammar = pairs(engine, args.runs, args.tokens, mask=False)
        print(f"  decode with the schema / without: median {statistics.median(ratios):.3f}x "
              f"(min {min(ratios):.3f}, max {max(ratios):.3f}; target >= 0.8); grammar median "
              f"{statistics.median(grammar):.3f} ms/token")
        print("with the mask counted on every token (--grammar-mask):")
        ratios, grammar = pairs(engine, args.runs, args.tokens, mask=True)
        print(f"  decode with the schema and its mask / without: median {statistics.median(ratios):.3f}x "
              f"(min {min(ratios):.3f}, max {max(ratios):.3f}); grammar median {statistics.median(grammar):.3f} "
              f"ms/token")
        valid, grammar = fixed_set(engine)
        print(f"fixed set (tests/engine/local/schemas.json), greedy, 64 tokens at most: {valid}/{len(SCHEMAS)} "
              f"valid ({valid / len(SCHEMAS):.0%}; target 100%); grammar median {statistics.median(grammar):.3f} "
              f"ms/token")
    finally:
        engine.close()


if __name__ == "__main__":
    main()
