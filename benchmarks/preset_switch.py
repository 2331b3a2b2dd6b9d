"""A preset switch in an open chat, on the real default model: what the switch says it costs and
what the next turn prefills again (chatapp.engine.chat.preset_switch).

For each switch, a fresh chat on one loaded model asks the same `--turns` questions at
temperature 0, then switches, then asks one more. "held" is the branch's tokens the cache held
before the switch; "re-prefilled" is those the next turn prefilled again (held minus the turn's
cached tokens). Target: a switch of samplers only re-prefills 0 tokens.

    .venv/bin/python benchmarks/preset_switch.py [--turns 3] [--threads 2]
"""

from __future__ import annotations

import argparse

from chatapp.config import Settings
from chatapp.engine.chat import preset_switch
from chatapp.engine.chat.engine import Engine
from chatapp.engine.local.backend import LocalBackend
from chatapp.engine.local.llama import LlamaRuntime, LoadOptions
from chatapp.engine.models.resolve import resolve_model
from chatapp.presets import parse_preset

QUESTIONS = ("Name a fruit.", "Name a colour.", "Name a planet.", "Name a river.", "Name a tree.")
SWITCHES = {
    "samplers only": {"temperature": 0.9, "top_k": 20, "top_p": 0.8, "min_p": 0.1, "seed": 7, "max_tokens": 16},
    "samplers and thinking budget": {"temperature": 0.5, "think_budget": 64},
    "system prompt": {"system_prompt": "You are a pirate. Answer briefly."},
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    base = Settings(n_ctx=2048, temperature=0.0, max_tokens=24, threads=args.threads,
                    system_prompt="You are a concise assistant.")
    runtime = LlamaRuntime(resolve_model(None, Settings()), LoadOptions(n_ctx=base.n_ctx, n_threads=args.threads))
    print("| switch | said before | held | next turn: cached | prefilled | re-prefilled |")
    print("|---|---|---:|---:|---:|---:|")
    try:
        for label, table in SWITCHES.items():
            engine = Engine(LocalBackend(runtime), base)
            engine.clear_cache()
            for question in QUESTIONS[:args.turns]:
                list(engine.send(question))
            wanted = parse_preset("bench", table, "benchmark").apply(engine.settings)
            plan = preset_switch.plan(engine, wanted)
            preset_switch.switch(engine, wanted)
            record = list(engine.send(QUESTIONS[args.turns % len(QUESTIONS)]))[-1].record
            again = max(0, plan.held - record.cached_tokens)
            said = plan.notice().split("; ")[1]
            print(f"| {label} | {said} | {plan.held} | {record.cached_tokens} | {record.prefill_tokens} | {again} |")
    finally:
        runtime.close()


if __name__ == "__main__":
    main()
