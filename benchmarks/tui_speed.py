"""Decode speed inside the running TUI against `chatapp ask`, and time from start to ready.

1. The same greedy prompt, model and threads (by default the TUI's own choice, physical
   cores - 1): the TUI (driven headless with Textual's pilot, panels live) against
   `chatapp ask --json` in a subprocess. Median decode tok/s from the per-turn records.
   Target: TUI >= 97% of ask. `--threads N` compares at N threads instead.
2. Start to ready-for-input: a fresh process runs `chatapp`'s startup path (config, model
   resolution, llama.cpp load, Textual app) headless and reports when the first screen is
   up with the composer focused. Target: <= 1.5 s.

    .venv/bin/python benchmarks/tui_speed.py [--runs 5] [--tokens 128]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from chatapp.config import Settings
from chatapp.engine.engine import Engine
from chatapp.engine.hardware import threads_beside_ui
from chatapp.engine.models import resolve_model
from chatapp.ui.app import ChatApp
from chatapp.ui.messages import TurnFinished

PROMPT = "Write a long, detailed story about a lighthouse keeper who finds a message in a bottle."
CHATAPP = Path(sys.executable).with_name("chatapp")

READY_CHILD = """
import sys, time
from chatapp.config import load_settings
from chatapp.engine.engine import Engine
from chatapp.ui.app import ChatApp

class Timed(ChatApp):
    def on_ready(self) -> None:
        self.call_after_refresh(self._report)

    def _report(self) -> None:
        print(time.time(), self.focused is not None and self.focused.id, flush=True)
        self.exit()

from chatapp.engine.hardware import threads_beside_ui
settings = load_settings()
engine = Engine.open(settings.replace(threads=settings.threads or threads_beside_ui()))
app = Timed(engine)
app.run(headless=True, size=(120, 40))
engine.close()
"""


async def tui_decode_tps(path: Path, settings: Settings, runs: int) -> list[float]:
    engine = Engine.open(settings, str(path))
    finished: list[TurnFinished] = []

    def hook(message) -> None:
        if isinstance(message, TurnFinished):
            finished.append(message)

    app = ChatApp(engine, settings=settings)
    async with app.run_test(size=(140, 44), message_hook=hook) as pilot:
        for run in range(runs):
            await app.action_new_chat()
            await pilot.pause()
            engine.runtime.clear_kv()  # same cold prompt as the ask side
            app.query_one("#composer").text = PROMPT
            await pilot.press("enter")
            while len(finished) <= run:
                await pilot.pause(0.05)
    engine.close()
    return [m.record.decode_tps for m in finished]


def ask_decode_tps(path: Path, settings: Settings, runs: int) -> list[float]:
    figures = []
    for _ in range(runs):
        out = subprocess.run(
            [str(CHATAPP), "ask", PROMPT, "--json", "--model", str(path), "--temperature", "0",
             "--max-tokens", str(settings.max_tokens), "--ctx", str(settings.n_ctx),
             "--threads", str(settings.threads)],
            capture_output=True, text=True, check=True)
        figures.append(json.loads(out.stdout)["decode_tps"])
    return figures


def startup_seconds(path: Path, runs: int) -> list[float]:
    times = []
    env = {**os.environ, "CHATAPP_MODEL": str(path)}
    for _ in range(runs):
        start = time.time()
        out = subprocess.run([sys.executable, "-c", READY_CHILD], capture_output=True, text=True, env=env,
                             check=True)
        ready_at, focused = out.stdout.split()
        assert focused == "composer", f"ready without the composer focused ({focused})"
        times.append(float(ready_at) - start)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--threads", type=int, default=0,
                        help="llama.cpp threads on both sides; 0: what the TUI picks (physical cores - 1)")
    args = parser.parse_args()
    path = resolve_model()
    settings = Settings(n_ctx=2048, temperature=0.0, max_tokens=args.tokens,
                        threads=args.threads or threads_beside_ui())

    tui = asyncio.run(tui_decode_tps(path, settings, args.runs))
    ask = ask_decode_tps(path, settings, args.runs)
    ready = startup_seconds(path, args.runs)
    print(f"model {path.name} · threads {settings.threads} · up to {args.tokens} tokens · {args.runs} runs (medians)")
    print(f"decode tok/s   chatapp ask {statistics.median(ask):7.1f}   TUI {statistics.median(tui):7.1f}   "
          f"TUI/ask {statistics.median(tui) / statistics.median(ask):.1%} (target >= 97%)")
    print(f"start to ready-for-input   median {statistics.median(ready):.2f} s   "
          f"min {min(ready):.2f} s   max {max(ready):.2f} s (target <= 1.5 s)")


if __name__ == "__main__":
    main()
