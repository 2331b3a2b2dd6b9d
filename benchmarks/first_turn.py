"""The first turn on a new machine: how long after its prefill the first token comes, cold and warm.

A new user's first `chatapp ask` (or first question in `chatapp chat`) runs in a home where
nothing was measured yet: no memory bandwidth, no model facts, no sessions database, no thread
choice, no drafting verdict (XDG folders in a fresh temp dir, as a new account has). Whatever is
measured once must not be paid between Enter and the first token. Each run takes a fresh home
and starts two processes in it, one after the other, with the same question: the first is
cold, the second warm (what the first left on disk). The figure is the turn record's `ttft_ms`
less its `prefill_ms`: what came between the question and the first token besides reading it.

- ask: `chatapp ask --json` at the defaults (greedy, 16 tokens), the question on the command line.
- tui: `chatapp chat` in a tmux window (160x50), the question typed as tmux types it, Enter
  1 s after the last key; the record is read from the sessions database (every chat is kept).
  Prefill while typing is on (the default), so most of the prompt is cached at Enter and
  `prefill_ms` is what was left.

Target (issue 36): cold, TTFT <= prefill + 300 ms in both.

    .venv/bin/python benchmarks/first_turn.py [--runs 3] [--surfaces ask,tui] [--draft ngram]
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from terminal import Terminal, fresh_home
from tui_vs_llama_cli import READY, last_record

CHATAPP = Path(sys.executable).with_name("chatapp")
QUESTION = ("My grandmother kept bees in three hives behind her cottage for forty years. What should I know "
            "before I take over the hives this spring, and what equipment do I need first?")
"""About 45 tokens once templated (no hyphen or semicolon: tmux reads those in send-keys arguments)."""
TARGET_MS = 300.0


def home_env(home: Path, model: Path, draft: str | None) -> dict[str, str]:
    return fresh_home(home, model, "temperature = 0.0\nmax_tokens = 16\n" + (f'draft = "{draft}"\n' if draft else ""))


def ask(env: dict[str, str]) -> dict:
    done = subprocess.run([str(CHATAPP), "ask", "--json", QUESTION], capture_output=True, text=True,
                          env={**os.environ, **env}, timeout=600)
    if done.returncode != 0:
        raise SystemExit(f"first_turn: chatapp ask failed ({done.returncode}): {done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def tui(env: dict[str, str], home: Path, turns_before: int) -> dict:
    term = Terminal("chatapp-first-turn", [str(CHATAPP), "chat"], env)
    try:
        term.wait_for(READY, 120)
        term.type(QUESTION)
        time.sleep(1.0)
        term.keys("Enter")
        deadline, record = time.monotonic() + 300, None
        while record is None:
            if not term.alive or time.monotonic() > deadline:
                raise SystemExit(f"first_turn: no turn recorded:\n{term.screen()}")
            time.sleep(0.1)
            record = turn_record(home, turns_before)
        term.keys("C-q")
        term.wait_exit(30)
    finally:
        term.close()
    return record


def turn_record(home: Path, turns_before: int) -> dict | None:
    try:
        return last_record(home, turns_before)
    except sqlite3.OperationalError:  # the database is being created: its tables come next
        return None


def overhead(record: dict) -> float:
    return record["ttft_ms"] - record["prefill_ms"]


def describe(record: dict) -> str:
    bandwidth = record.get("memory_bandwidth_gbps")
    said = f"{bandwidth} GB/s" if bandwidth is not None else f"null ({record.get('memory_bandwidth_note', '')})"
    return (f"prefill {record['prefill_tokens']} tok in {record['prefill_ms']:.0f} ms, "
            f"ttft {record['ttft_ms']:.0f} ms, ttft - prefill {overhead(record):.0f} ms; bandwidth {said}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="fresh homes per surface (a cold and a warm process each)")
    parser.add_argument("--surfaces", default="ask,tui", help="ask, tui or both, comma-separated")
    parser.add_argument("--draft", default=None, help="draft in the config (default: chatapp's default)")
    args = parser.parse_args()
    from chatapp.engine.models.resolve import resolve_model

    model = resolve_model()
    print(f"{model.name}; {args.runs} fresh homes per surface; draft {args.draft or 'default'}; "
          f"load average at start {os.getloadavg()[0]:.2f}", flush=True)
    for surface in args.surfaces.split(","):
        figures: dict[str, list[float]] = {"cold": [], "warm": []}
        for run in range(args.runs):
            with tempfile.TemporaryDirectory(prefix="chatapp-first-turn-") as tmp:
                home = Path(tmp)
                env = home_env(home, model, args.draft)
                for turn, state in enumerate(("cold", "warm")):
                    record = ask(env) if surface == "ask" else tui(env, home, turn)
                    figures[state].append(overhead(record))
                    print(f"  {surface} run {run + 1} {state}: {describe(record)}", flush=True)
        for state, values in figures.items():
            print(f"{surface} {state}: ttft - prefill median {statistics.median(values):.0f} ms "
                  f"({min(values):.0f}-{max(values):.0f}; target <= {TARGET_MS:.0f} cold)", flush=True)
    print(f"load average at the end {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
