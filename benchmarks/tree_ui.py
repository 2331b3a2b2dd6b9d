"""The TUI on a big conversation tree: 1,000 messages in 100 branches.

Two sessions are built with the real default model's engine and saved: "tree", a first branch
of 10 messages and 99 more of 10 messages each, forking off its first four replies and at the
root (1,000 messages, 100 leaves, no path longer than 20 messages); and "path", that first
branch alone. Then the real ChatApp (headless, Textual's pilot) opens them in turn, and the
benchmark prints the UI thread's CPU time (time.thread_time on the thread that runs the event
loop: the engine's work on the workers is not counted) for:

  open:   from the worker's SessionOpened arriving until the session is drawn and painted, its
          notifications included ("tree" and "path" alternate, so what a tree adds is the
          difference); the wall time from asking to drawn (the worker's resume) beside it;
  draw:   the transcript cleared and the active path drawn again, laid out and painted;
  switch: Alt+Right on a message with siblings (20 or 25 of them), from the key until the new
          path is drawn and painted, the wait for the worker included (the engine's switch and
          the session's save run on the worker: the wall time is beside it);
  tree:   the tree screen (Alt+T) for all 1,000 messages, built and painted (the wall time
          beside it includes the worker tokenizing each of the 100 leaves' paths).

The target (issue 21): open, draw and switch each within 100 ms of UI-thread time. While a
worker runs, the UI thread only waits (this benchmark's poll sleeps without asking for a
repaint); for an open that idle time is left out by starting the count when the worker's
message arrives (a switch counts it: an upper bound).

    .venv/bin/python benchmarks/tree_ui.py [--rounds 3] [--switches 10]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
from pathlib import Path

PARAGRAPH = ("Prefill reads the whole prompt in one batch, so its cost grows with the prompt; decode then adds "
             "one token at a time, reading every weight for each.")
REPLY = f"{PARAGRAPH}\n\n- the KV cache keeps what was computed\n- a branch keeps its own state\n\n{PARAGRAPH}"


def build_tree(branches: int = 100):
    """1,000 messages, 100 leaves: branch 0 is 10 messages; branch k forks after branch 0's reply
    k % 5 (or at the root), and is 10 messages long."""
    from chatapp.engine.chat.tree import MessageTree
    from chatapp.engine.events import Message

    tree = MessageTree()
    trunk: list[str] = []
    parent = None
    for turn in range(5):
        parent = tree.add(Message("user", f"Question {turn} of the first branch: how does step {turn} work?"),
                          parent).id
        trunk.append(parent)
        parent = tree.add(Message("assistant", f"Step {turn}. {REPLY}"), parent).id
        trunk.append(parent)
    for branch in range(1, branches):
        fork = branch % 5  # the root, or one of the first four replies (the fifth stays a leaf)
        parent = None if fork == 0 else trunk[2 * fork - 1]
        for turn in range(5):
            parent = tree.add(Message("user", f"Branch {branch}, question {turn}: and then?"), parent).id
            parent = tree.add(Message("assistant", f"Branch {branch}, step {turn}. {REPLY}"), parent).id
    assert len(tree) == 10 * branches and len(tree.leaves()) == branches
    tree.switch(trunk[-1], descend=False)
    return tree


async def measure(app, rounds: int, switches: int) -> dict[str, list[float]]:
    from chatapp.ui.messages import BranchChanged, SessionOpened
    from chatapp.ui.screens.tree import TreeScreen
    from chatapp.ui.shown import shown_path
    from chatapp.ui.widgets.transcript import Transcript

    figures: dict[str, list[float]] = {"open tree": [], "open path": [], "open wall": [], "draw": [],
                                       "switch": [], "switch wall": [], "tree screen": [], "tree wall": []}
    seen: list = []
    arrived: dict[type, float] = {}

    def hook(message) -> None:  # called on the UI thread as each message is handled
        seen.append(message)
        arrived[type(message)] = time.thread_time()

    async def settle(pilot, predicate, timeout=120.0):
        deadline = time.monotonic() + timeout
        while not predicate():
            if time.monotonic() > deadline:
                raise SystemExit("timed out")
            await asyncio.sleep(0.005)
        await pilot.pause()

    def count(kind) -> int:
        return sum(isinstance(m, kind) for m in seen)

    async with app.run_test(size=(140, 44), message_hook=hook) as pilot:
        await settle(pilot, lambda: count(SessionOpened) and not app.session_busy)
        for name in ["path", "tree"] * rounds:
            opened, wall = count(SessionOpened), time.perf_counter()
            app.sessions_ui.request("open", name)
            await settle(pilot, lambda: count(SessionOpened) > opened and not app.session_busy)
            figures[f"open {name}"].append((time.thread_time() - arrived[SessionOpened]) * 1000)
            figures["open wall"].append((time.perf_counter() - wall) * 1000)
        transcript = app.query_one(Transcript)
        for _ in range(rounds):
            started = time.thread_time()
            await app.show_path(*shown_path(app.engine), anew=True)  # as a session opened draws it
            await pilot.pause()
            figures["draw"].append((time.thread_time() - started) * 1000)
        for n in range(switches):
            transcript.select(transcript.messages()[2 if n % 2 else 0])  # a child of a fork
            done = count(BranchChanged)
            started, wall = time.thread_time(), time.perf_counter()
            await pilot.press("alt+right")
            await settle(pilot, lambda: count(BranchChanged) > done
                         and not any(w.group == "branch" and w.is_running for w in app.workers))
            figures["switch"].append((time.thread_time() - started) * 1000)
            figures["switch wall"].append((time.perf_counter() - wall) * 1000)
        started, wall = time.thread_time(), time.perf_counter()
        await pilot.press("alt+t")
        await settle(pilot, lambda: isinstance(app.screen, TreeScreen))
        figures["tree screen"].append((time.thread_time() - started) * 1000)
        figures["tree wall"].append((time.perf_counter() - wall) * 1000)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--switches", type=int, default=10)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as home:
        for var in ("XDG_DATA_HOME", "XDG_CONFIG_HOME", "XDG_CACHE_HOME"):
            os.environ[var] = str(Path(home) / var.lower())
        from chatapp.config import Settings
        from chatapp.engine.models.catalog import load_catalog
        from chatapp.engine.models.resolve import resolve_model
        from chatapp.engine.opening import open_engine
        from chatapp.engine.sessions import SessionManager
        from chatapp.ui.app import ChatApp

        model = str(resolve_model(load_catalog().default))
        settings = Settings().replace(n_ctx=4096, temperature=0.0)
        manager = SessionManager.open(settings)
        engine = open_engine(settings, model)
        for name, branches in (("path", 1), ("tree", 100)):
            tree = build_tree(branches)
            engine.load_conversation(engine.messages[:1] + tree.messages(), leaf=tree.leaf)
            manager.resume(name, engine).save_now()
        engine.close()
        app = ChatApp(open_engine(settings, model), settings=settings, session="tree", sessions=manager)
        try:
            figures = asyncio.run(measure(app, args.rounds, args.switches))
        finally:
            app.release_engine()
    print("1,000 messages in 100 branches (tree) and its first branch alone (path, 10 messages)")
    print("UI-thread CPU time, ms: median, max; target: open, draw and switch each <= 100 ms")
    for name, values in figures.items():
        print(f"  {name:12s} {statistics.median(values):8.1f} {max(values):8.1f}   "
              f"({', '.join(f'{v:.0f}' for v in values)})")


if __name__ == "__main__":
    main()
