"""Prefill while typing, in the real `chatapp` in a real terminal: what is left after Enter.

Each run starts `chatapp chat` in a tmux window (160x50) in a fresh home, greedy, 2 threads
(fixed, so replies can be compared), and types a question of 150+ tokens in bursts of a few
words with pauses between them, as a person types; Enter comes 2.5 s after the last key. The
turn's record (from the session journal) says how many prompt tokens were prefilled after Enter
(`prefill_tokens`), how many were typed ahead (`prefilled_while_typing`) and the time from Enter
to the first reply token (`ttft_ms`). Runs come in pairs, `prefill_while_typing` on and off, in
alternating order; each pair's replies must be identical.

Targets (issue 24): after Enter at most 30 tokens left to prefill, and the time to first token
at most 0.25x of the same question with the setting off (median of the pairs' ratios).

Warm (the default), the runs share one cache folder, filled by a warm-up run first; `--cold`
gives every run a fresh cache too, as a new user's first chat has (issue 36). Each line also
says the time from Enter to the first token less the prefill after Enter (`ttft - prefill`).

    .venv/bin/python benchmarks/typing_prefill.py [--runs 5] [--cold]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

from chatapp.engine.models.resolve import resolve_model
from terminal import Terminal  # benchmarks/ is on sys.path when a script there runs
from tui_vs_llama_cli import CHATAPP, READY, last_record

QUESTION = ("I am planning a small vegetable garden behind my house. The plot gets about six hours of sun "
            "in summer, the soil is heavy clay that stays wet in spring, and I live where the summers are hot "
            "and dry. Which vegetables should I start with in the first year, how should I improve the soil "
            "before planting, and how often should I water during July and August? I also have a compost "
            "heap from last year, a rain barrel that holds about two hundred litres, and a neighbour who keeps "
            "chickens and offers me their manure every spring. Would raised beds be worth building, and if so "
            "how deep should they be, what should I fill them with, and should I line the bottom with "
            "cardboard or wire mesh to keep the moles out?")
"""About 170 tokens of question (no hyphen or semicolon: tmux reads those in send-keys arguments)."""
BURST_WORDS = (3, 6, 4, 2, 5)
"""Words per burst, in turn."""
PAUSES = (0.35, 0.8, 0.5, 1.2, 0.6)
"""Seconds between bursts, in turn: thinking between a few words typed fast."""
ENTER_AFTER = 2.5
MAX_LEFT = 30
TTFT_RATIO = 0.25


def env(home: Path, cache: Path, model: Path, on: bool) -> dict[str, str]:
    config = home / "config" / "chatapp" / "config.toml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(f"temperature = 0.0\nmax_tokens = 32\nthreads = 2\n"
                      f"prefill_while_typing = {'true' if on else 'false'}\n")
    found = {"XDG_CONFIG_HOME": str(home / "config"), "XDG_DATA_HOME": str(home / "data"),
             "XDG_CACHE_HOME": str(cache), "CHATAPP_MODEL": str(model), "TERM": "xterm-256color"}
    if os.environ.get("PYTHONPATH"):  # this checkout's chatapp, not the tmux server's environment's
        found["PYTHONPATH"] = os.environ["PYTHONPATH"]
    return found


def bursts(text: str) -> list[str]:
    words, out, i = text.split(" "), [], 0
    while words:
        n = BURST_WORDS[i % len(BURST_WORDS)]
        out.append(" ".join(words[:n]) + (" " if len(words) > n else ""))
        words, i = words[n:], i + 1
    return out


def run(model: Path, cache: Path | None, on: bool) -> dict:
    """One run in a fresh home; its cache folder is `cache`, or (None) a fresh one too."""
    with tempfile.TemporaryDirectory(prefix="chatapp-typing-") as tmp:
        home = Path(tmp)
        term = Terminal("chatapp-typing", [str(CHATAPP), "chat", "--session", "bench"],
                        env(home, cache or home / "cache", model, on))
        try:
            term.wait_for(READY, 120)
            time.sleep(1.0)
            for i, burst in enumerate(bursts(QUESTION)):
                term.type(burst)
                time.sleep(PAUSES[i % len(PAUSES)])
            time.sleep(ENTER_AFTER)
            term.keys("Enter")
            record = None
            deadline = time.monotonic() + 300
            while record is None:
                if not term.alive or time.monotonic() > deadline:
                    raise SystemExit(f"typing_prefill: no turn recorded:\n{term.screen()}")
                time.sleep(0.1)
                record = last_record(home, 0)
            term.keys("C-q")
            term.wait_exit(30)
        finally:
            term.close()
    return record


def pair_of_runs(model: Path, cache: Path | None, pair: int, ratios: list[float], left: list[int]) -> None:
    order = (True, False) if pair % 2 == 0 else (False, True)
    records = {on: run(model, cache, on) for on in order}
    on, off = records[True], records[False]
    if on["reply"] != off["reply"]:
        raise SystemExit(f"typing_prefill: pair {pair + 1}'s replies differ:\n"
                         f" on: {on['reply']!r}\noff: {off['reply']!r}")
    ratios.append(on["ttft_ms"] / off["ttft_ms"])
    left.append(on["prefill_tokens"])
    print(f"  pair {pair + 1}: prompt {on['prompt_tokens']} tok; on: {on['prefilled_while_typing']} typed ahead, "
          f"{on['cached_tokens']} cached at Enter, {on['prefill_tokens']} prefilled after Enter in "
          f"{on['prefill_ms']:.0f} ms, ttft {on['ttft_ms']:.0f} ms (- prefill {overhead(on):.0f}); off: "
          f"{off['prefill_tokens']} prefilled after Enter in {off['prefill_ms']:.0f} ms, ttft {off['ttft_ms']:.0f} ms "
          f"(- prefill {overhead(off):.0f}); ratio {ratios[-1]:.3f}; replies identical", flush=True)


def overhead(record: dict) -> float:
    """Enter to the first token, less the prefill after Enter: what the turn waited for besides."""
    return record["ttft_ms"] - record["prefill_ms"]



def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="pairs (on and off) to run")
    parser.add_argument("--cold", action="store_true", help="a fresh cache folder for every run, and no warm-up")
    args = parser.parse_args()
    model = resolve_model()
    ratios, left = [], []
    with tempfile.TemporaryDirectory(prefix="chatapp-typing-cache-") as cache:
        if not args.cold:
            # One cache folder for every run: the machine's measurements (memory bandwidth, the
            # decode thread count) are made once, in a warm-up run, as on a user's machine.
            run(model, Path(cache), True)
        for pair in range(args.runs):
            pair_of_runs(model, None if args.cold else Path(cache), pair, ratios, left)
    print(f"typing_prefill ({'cold' if args.cold else 'warm'}): after Enter {statistics.median(left):.0f} tokens "
          f"left to prefill (median; {min(left)}-{max(left)}; target <= {MAX_LEFT}); ttft on/off "
          f"{statistics.median(ratios):.3f} "
          f"(median of {args.runs} pairs; {min(ratios):.3f}-{max(ratios):.3f}; target <= {TTFT_RATIO})", flush=True)


if __name__ == "__main__":
    main()
