"""Decode speed inside the running TUI against `chatapp ask`, and time from start to ready.

1. The same greedy prompt, model and threads (by default the TUI's own choice, physical
   cores - 1): the TUI, driven headless with Textual's pilot with every panel live, against
   `chatapp ask --json`. Each run is a pair of fresh processes, one of each, in alternating
   order, so that drift in the machine's speed (single-thread decode here wanders by +-10%
   from minute to minute) falls on both sides alike. Decode tok/s comes from each turn's
   record (llama.cpp's counters). Target: TUI >= 97% of ask, as the median of the pairs' ratios.
   Also printed: the share of the turn the TUI's decode thread spent on a CPU rather than
   waiting for the GIL, which does not depend on the machine's speed.
2. Start to ready-for-input: the real `chatapp` command on a pseudo-terminal (CLI, config,
   model resolution, llama.cpp load, Textual app), timed from launch until the screen shows
   the composer, which has the focus at start (a pilot test checks that).
   Target: <= 1.5 s.

    .venv/bin/python benchmarks/tui_speed.py [--runs 10] [--tokens 128] [--threads N]
"""

from __future__ import annotations

import argparse
import asyncio
import fcntl
import json
import os
import pty
import select
import signal
import statistics
import struct
import subprocess
import sys
import termios
import time
from collections.abc import Iterator
from pathlib import Path

from chatapp.config import Settings
from chatapp.engine.engine import Engine
from chatapp.engine.events import Event, TextDelta, TurnDone
from chatapp.engine.hardware import threads_beside_ui
from chatapp.engine.models import resolve_model
from chatapp.ui.app import ChatApp
from chatapp.ui.messages import TurnFinished
from chatapp.ui.widgets.composer import PLACEHOLDER

PROMPT = "Write a long, detailed story about a lighthouse keeper who finds a message in a bottle."
CHATAPP = Path(sys.executable).with_name("chatapp")
READY_MARK = PLACEHOLDER[1:24].encode()
"""The empty composer's placeholder, less its first cell, where the focused composer draws its cursor."""

def timed(events: Iterator[Event], on_cpu: list[float]) -> Iterator[Event]:
    """Pass a turn's events through, noting the decode thread's CPU time over wall time from
    the first reply text to the end of the turn."""
    started = None
    for event in events:
        if isinstance(event, TextDelta) and started is None:
            started = time.perf_counter(), time.thread_time()
        if isinstance(event, TurnDone) and started is not None:
            on_cpu.append((time.thread_time() - started[1]) / (time.perf_counter() - started[0]))
        yield event


class TimedTUI:
    """The TUI on a model, for driving headless: its engine notes the decode thread's on-CPU
    share of each turn (`on_cpu`), and the app's TurnFinished messages are kept."""

    def __init__(self, path: Path, settings: Settings) -> None:
        self.engine = Engine.open(settings, str(path))
        self.on_cpu: list[float] = []
        self.finished: list[TurnFinished] = []
        send = self.engine.send
        self.engine.send = lambda text: timed(send(text), self.on_cpu)
        self.app = ChatApp(self.engine, settings=settings)

    def run_test(self):
        return self.app.run_test(size=(140, 44), message_hook=self._keep)

    def _keep(self, message) -> None:
        if isinstance(message, TurnFinished):
            self.finished.append(message)

    async def turn(self, pilot, text: str) -> TurnFinished:
        """Type `text`, send it, and wait for the turn to finish."""
        done = len(self.finished)
        self.app.query_one("#composer").text = text
        await pilot.press("enter")
        while len(self.finished) <= done:
            await pilot.pause(0.05)
        return self.finished[-1]


async def one_tui_turn(path: Path, settings: Settings) -> dict[str, float]:
    """One turn in a TUI driven headless; runs in the child process of `tui_turn`."""
    tui = TimedTUI(path, settings)
    async with tui.run_test() as pilot:
        finished = await tui.turn(pilot, PROMPT)
    tui.engine.close()
    return {"decode_tps": finished.record.decode_tps, "on_cpu": tui.on_cpu[0]}


def tui_turn(path: Path, tokens: int, threads: int) -> dict[str, float]:
    """`one_tui_turn` in a fresh process, as `ask_turn` is."""
    settings = {"n_ctx": 2048, "temperature": 0.0, "max_tokens": tokens, "threads": threads}
    out = subprocess.run([sys.executable, __file__, "--tui-turn", json.dumps(settings)],
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout.splitlines()[-1])


def ask_turn(path: Path, tokens: int, threads: int) -> float:
    out = subprocess.run(
        [str(CHATAPP), "ask", PROMPT, "--json", "--model", str(path), "--temperature", "0",
         "--max-tokens", str(tokens), "--ctx", "2048", "--threads", str(threads)],
        capture_output=True, text=True, check=True)
    return json.loads(out.stdout)["decode_tps"]


def time_to_ready(path: Path, timeout: float = 60.0) -> float:
    """Run `chatapp` on a pseudo-terminal of 120x40 and time it until the screen shows the composer."""
    start = time.perf_counter()
    pid, fd = pty.fork()
    if pid == 0:  # the child: a terminal of a fixed size, then the real command
        fcntl.ioctl(0, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
        os.environ.update(TERM="xterm-256color", CHATAPP_MODEL=str(path))
        os.execv(str(CHATAPP), [str(CHATAPP)])
    screen = b""
    try:
        while READY_MARK not in screen:
            if not select.select([fd], [], [], timeout)[0]:
                raise SystemExit(f"chatapp showed no composer within {timeout:g} s: {screen[-300:]!r}")
            screen += os.read(fd, 1 << 16)
        return time.perf_counter() - start
    finally:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        os.close(fd)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10, help="pairs of decode runs, and startup runs")
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--threads", type=int, default=0,
                        help="llama.cpp threads on both sides; 0: what the TUI picks (physical cores - 1)")
    parser.add_argument("--tui-turn", metavar="SETTINGS_JSON", help=argparse.SUPPRESS)
    args = parser.parse_args()
    path = resolve_model()
    if args.tui_turn:  # the child process of tui_turn()
        print(json.dumps(asyncio.run(one_tui_turn(path, Settings(**json.loads(args.tui_turn))))))
        return
    threads = args.threads or threads_beside_ui()

    ask, tui, on_cpu, ratios = [], [], [], []
    for run in range(args.runs):
        if run % 2:
            tui_run, ask_tps = tui_turn(path, args.tokens, threads), ask_turn(path, args.tokens, threads)
        else:
            ask_tps, tui_run = ask_turn(path, args.tokens, threads), tui_turn(path, args.tokens, threads)
        ask.append(ask_tps)
        tui.append(tui_run["decode_tps"])
        on_cpu.append(tui_run["on_cpu"])
        ratios.append(tui[-1] / ask_tps)
        print(f"pair {run + 1:2}: ask {ask_tps:6.1f}  TUI {tui[-1]:6.1f} tok/s  TUI/ask {ratios[-1]:6.1%}  "
              f"TUI decode thread on CPU {on_cpu[-1]:.1%}", flush=True)
    ready = [time_to_ready(path) for _ in range(args.runs)]

    print(f"model {path.name} · threads {threads} · up to {args.tokens} tokens · {args.runs} pairs (medians)")
    print(f"decode tok/s   chatapp ask {statistics.median(ask):7.1f}   TUI {statistics.median(tui):7.1f}   "
          f"TUI/ask {statistics.median(ratios):.1%} (target >= 97%; pairs {min(ratios):.1%}-{max(ratios):.1%})")
    print(f"TUI decode thread on a CPU {statistics.median(on_cpu):.1%} of the turn "
          f"(the rest waiting for the GIL or the scheduler)")
    print(f"start to ready-for-input   median {statistics.median(ready):.2f} s   "
          f"min {min(ready):.2f} s   max {max(ready):.2f} s (target <= 1.5 s)")


if __name__ == "__main__":
    main()
