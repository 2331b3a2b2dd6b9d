"""Branches of a conversation tree: what an edit and a switch of branch cost.

1. Edit: a 20-turn conversation (about 3,000 tokens) is in the cache; the 2nd question is edited.
   The turn must prefill exactly the tokens after the common prefix of the old and new prompts
   (checked against the token lists), and its time to first token, from the call to the first
   streamed text (the stash of the branch left included), is compared with a new question of the
   same length at the end of the conversation. Paired runs, alternating which goes first; each
   run on a fresh engine warmed the same way. Target: edit TTFT <= 1.2x.
2. Switch: two branches of 2,000+ tokens each. After both have run a turn, switching to the
   other restores its kept state; the next turn's TTFT is compared with re-prefilling that
   branch (the same turn with an empty cache), each way, in one process and after a restart
   (a second process opens the saved session, whose leaves' states are files, and switches).
   Target: <= 0.05x.

    .venv/bin/python benchmarks/branches.py [--runs 5] [--threads 2]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from chatapp.config import Settings
from chatapp.engine.chat.engine import Engine
from chatapp.engine.chat.tree import MessageTree
from chatapp.engine.events import Message, TextDelta, TurnDone
from chatapp.engine.local.backend import LocalBackend
from chatapp.engine.models.resolve import resolve_model
from chatapp.engine.sessions import SessionManager
from chatapp.engine.tokens import common_prefix

TOPICS = ("lighthouses", "tidal pools", "bread baking", "comet orbits", "glacier flow", "violin making",
          "bee colonies", "river deltas", "paper folding", "desert rain")
QUESTION = "Question {i}: tell me one fact about {topic}, and say in a few words why it matters to people."
EDITED = "Question one, asked again: tell me one fact about sea ice, and say in a few words why it matters to us."
AT_END = "Question twenty: tell me one fact about night skies, and say in a few words why it matters to people."


def settings_for(args) -> Settings:
    return Settings(n_ctx=args.ctx, temperature=0.0, max_tokens=8, threads=args.threads,
                    system_prompt="You are a concise assistant.")


def open_engine(args) -> Engine:
    settings = settings_for(args)
    return Engine(LocalBackend.load(resolve_model(None, settings), settings), settings)


def pairs(tag: str, turns: int) -> list[Message]:
    messages = []
    for i in range(turns):
        topic = TOPICS[i % len(TOPICS)]
        messages.append(Message("user", f"[{tag}] " + QUESTION.format(i=i, topic=topic)))
        messages.append(Message("assistant", f"[{tag}] Fact {i} about {topic}: it is shaped by slow, patient forces "
                                             f"over long stretches of time, which is why people who study {topic} "
                                             "learn to wait, to measure twice, and to write down what they see."))
    return messages


def timed(events) -> tuple[float, dict]:
    """(ms from now to the first streamed text, the turn's record as JSON)."""
    start, first, record = time.perf_counter(), None, None
    for event in events:
        if isinstance(event, TextDelta) and first is None:
            first = time.perf_counter()
        elif isinstance(event, TurnDone):
            record = event.record
    return ((first or time.perf_counter()) - start) * 1000, record.to_json()


def warm(engine: Engine, messages: list[Message]) -> None:
    """The conversation loaded and its whole prompt in the cache (one short turn)."""
    engine.load_conversation(messages)
    list(engine.send("Thanks."))


def edit_run(args, first: str) -> tuple[float, float, bool]:
    """One pair: (edit TTFT, at-end TTFT, the edit prefilled exactly past the common prefix)."""
    conversation = [Message("system", "You are a concise assistant."), *pairs("a", 20)]
    results, exact = {}, False
    for case in (first, "end" if first == "edit" else "edit"):
        engine = open_engine(args)
        try:
            warm(engine, conversation)
            if case == "end":
                results[case], _ = timed(engine.send(AT_END))
                continue
            old = engine.prompt_ids(add_generation_prompt=False)
            second = engine.messages[3]
            results[case], record = timed(engine.edit(second.id, EDITED))
            new = engine.prompt_ids(engine.messages[:4])
            shared = common_prefix(old, new)
            exact = record["cached_tokens"] == shared and record["prefill_tokens"] == len(new) - shared
        finally:
            engine.close()
    return results["edit"], results["end"], exact


def two_branches(engine: Engine) -> tuple[str, str]:
    """Two branches from the first question on, each 2,000+ tokens, and a turn run on each (so
    each leaf has a kept state; the cache holds the second). Returns their leaves."""
    tree = MessageTree()
    for tag in "ab":
        tree.switch(None, descend=False)
        for message in pairs(tag, 24):
            tree.add(message, tree.leaf)
    first_b = tree.children(None)[1].id
    engine.load_conversation([Message("system", "You are a concise assistant."), *tree.messages()],
                             leaf=tree.descend(tree.children(None)[0].id))
    list(engine.send("Thanks."))
    leaf_a = engine.leaf
    engine.switch(first_b)
    list(engine.send("Thanks."))
    return leaf_a, engine.leaf


def switch_then_ask(engine: Engine, leaf: str) -> dict:
    started = time.perf_counter()
    switch = engine.switch(leaf)
    restore_ms = (time.perf_counter() - started) * 1000
    tokens = len(engine.prompt_ids(add_generation_prompt=False))
    ttft, _ = timed(engine.send("One more fact, please."))
    engine.delete_branch(engine.messages[-2].id)  # the branch as it was, for the next run
    return {"tokens": tokens, "ttft": ttft, "restore_ms": restore_ms, "how": switch.how}


def reprefill(engine: Engine, leaf: str) -> float:
    """The same turn on the same branch with nothing cached: what a switch without a kept state costs."""
    engine.switch(leaf)
    engine.clear_cache()
    ms, _ = timed(engine.send("One more fact, please."))
    engine.delete_branch(engine.messages[-2].id)
    return ms


def switch_in_process(args) -> dict:
    engine = open_engine(args)
    try:
        leaves = two_branches(engine)
        rows = []
        for _ in range(args.runs):
            for target in leaves:
                other = leaves[1] if target == leaves[0] else leaves[0]
                engine.switch(other)  # the cache holds the other branch, as after working there
                row = switch_then_ask(engine, target)
                rows.append(row | {"reprefill": reprefill(engine, target)})
        return {"rows": rows}
    finally:
        engine.close()


def switch_after_restart(args, home: Path) -> list[dict]:
    """Phase 1 here saves a session with both branches; phase 2, `runs` times, each in a new
    process, opens it and switches (the phase saves nothing, so each run starts alike)."""
    engine = open_engine(args)
    manager = SessionManager.open(settings_for(args), home)
    try:
        live = manager.resume("branches", engine)
        leaf_a, leaf_b = two_branches(engine)
        live.save_now(force=True)
        engine.switch(leaf_a)
        live.save_now(force=True)  # the active leaf is a; b's state was kept on leaving it
    finally:
        engine.close()
    rows = []
    for _ in range(args.runs):  # each a new process: the switch restores b from its state file
        out = subprocess.run([sys.executable, __file__, "--phase", "restart", "--home", str(home), "--leaf", leaf_b,
                              "--threads", str(args.threads), "--ctx", str(args.ctx)],
                             capture_output=True, text=True, check=True)
        rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
    return rows


def restart_phase(args) -> None:
    engine = open_engine(args)
    manager = SessionManager.open(settings_for(args), Path(args.home))
    live = manager.resume("branches", engine)
    row = switch_then_ask(engine, args.leaf)
    row |= {"resumed": live.report.restored_tokens, "reprefill": reprefill(engine, args.leaf)}
    print(json.dumps(row))
    engine.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--ctx", type=int, default=8192)
    parser.add_argument("--phase", default="all", choices=("all", "restart"))
    parser.add_argument("--home", default="")
    parser.add_argument("--leaf", default="")
    args = parser.parse_args()
    if args.phase == "restart":
        restart_phase(args)
        return
    print(f"threads {args.threads} · n_ctx {args.ctx} · greedy · {args.runs} paired runs\n")
    print("1. edit the 2nd question of a 20-turn conversation vs a new question of the same length at the end")
    edits = []
    for run in range(args.runs):
        edit, end, exact = edit_run(args, "edit" if run % 2 == 0 else "end")
        edits.append(edit / end)
        print(f"   run {run + 1}: edit {edit:7.0f} ms · at end {end:7.0f} ms · ratio {edit / end:.2f} · "
              f"prefilled exactly past the common prefix: {'yes' if exact else 'NO'}", flush=True)
    print(f"   median edit/at-end TTFT: {statistics.median(edits):.2f}x (target <= 1.2x)\n")

    print("2. switch between two branches of 2,000+ tokens: next turn's TTFT vs re-prefilling the branch")
    rows = switch_in_process(args)["rows"]
    for row in rows:
        print(f"   {row['tokens']:,} tokens: {row['how']} in {row['restore_ms']:.0f} ms, next TTFT {row['ttft']:.0f} ms"
              f" · re-prefill TTFT {row['reprefill']:.0f} ms · ratio {row['ttft'] / row['reprefill']:.3f}"
              f" (with the switch: {(row['ttft'] + row['restore_ms']) / row['reprefill']:.3f})", flush=True)
    ratios = [row["ttft"] / row["reprefill"] for row in rows]
    print(f"   median in one process: {statistics.median(ratios):.3f}x (target <= 0.05x)")
    with tempfile.TemporaryDirectory(prefix="chatapp-branches-") as home:
        restarted = switch_after_restart(args, Path(home))
    for row in restarted:
        print(f"   after a restart: resume restored {row['resumed']:,} tokens; switch {row['how']} in "
              f"{row['restore_ms']:.0f} ms from the leaf's state file, next TTFT {row['ttft']:.0f} ms · "
              f"re-prefill {row['reprefill']:.0f} ms · ratio {row['ttft'] / row['reprefill']:.3f} "
              f"(with the switch: {(row['ttft'] + row['restore_ms']) / row['reprefill']:.3f})", flush=True)
    ratios = [row["ttft"] / row["reprefill"] for row in restarted]
    print(f"   median after a restart: {statistics.median(ratios):.3f}x (target <= 0.05x)")

if __name__ == "__main__":
    main()
