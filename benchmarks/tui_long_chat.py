"""What a growing conversation costs the TUI: UI-thread CPU and decode speed, turn by turn.

One TUI (driven headless with Textual's pilot, panels live) holds a real chat of `--turns`
greedy turns on the default model. For the first, middle and last turn it prints the
transcript's widget count, the UI thread's CPU as a share of the turn's wall time, decode
tok/s, and the share of the decode the decode thread spent on a CPU rather than waiting
(for the GIL, which the UI thread holds while it lays out and paints). Decode also slows
as the context deepens, whatever the UI does; the on-CPU share is the UI's part.

    .venv/bin/python benchmarks/tui_long_chat.py [--turns 31]
"""

from __future__ import annotations

import argparse
import asyncio
import time

from chatapp.config import Settings
from chatapp.engine.hardware import threads_beside_ui
from chatapp.engine.models import resolve_model
from chatapp.ui.widgets.transcript import Transcript
from tui_speed import TimedTUI  # benchmarks/ is on sys.path when a script there runs

QUESTIONS = ["Explain how a lighthouse works.", "Give me a list of five fruits and their colours.",
             "Write a short poem about the sea.", "How do I sort a list in Python? Show code.",
             "What are the planets of the solar system?", "Describe a good breakfast."]


async def chat(turns: int) -> None:
    settings = Settings(n_ctx=8192, temperature=0.0, max_tokens=128, threads=threads_beside_ui())
    tui = TimedTUI(resolve_model(), settings)
    shown = {0, turns // 2, turns - 1}
    async with tui.run_test() as pilot:
        for turn in range(turns):
            wall, cpu = time.perf_counter(), time.thread_time()  # this is the UI thread
            record = (await tui.turn(pilot, QUESTIONS[turn % len(QUESTIONS)])).record
            await pilot.pause(0.2)  # the handlers' layout and paint after TurnFinished
            ui_share = (time.thread_time() - cpu) / (time.perf_counter() - wall)
            if turn in shown:
                widgets = len(tui.app.query_one(Transcript).query("*"))
                print(f"turn {turn + 1:3}: context {record.kv_used:5,} tok   transcript widgets {widgets:4}   "
                      f"UI thread CPU {ui_share:4.0%}   decode {record.decode_tps:5.1f} tok/s   "
                      f"decode thread on a CPU {tui.on_cpu[turn]:.1%}", flush=True)
    tui.engine.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=31)
    asyncio.run(chat(parser.parse_args().turns))


if __name__ == "__main__":
    main()
