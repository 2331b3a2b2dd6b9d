"""The TUI on a big conversation tree: 1,000 messages in 100 branches.

A session is built with the real default model's engine and saved: a first branch of 10
messages, then 99 more of 10 messages each, forking off its replies and its first question's
root, so every path is at most 20 messages. Then the real ChatApp (headless, Textual's pilot)
opens it, and the benchmark prints the UI thread's CPU time (time.thread_time on the thread
that runs the event loop, so the engine's work on the workers is not counted) for:

  open:   from the worker's SessionOpened to the transcript drawn (the message handled, then
          the screen laid out and painted);
  draw:   the transcript cleared and the active path drawn again, painted;
  switch: Alt+Right on a message with siblings, to the new path drawn and painted (the engine's
          switch runs on a worker; its wall time is printed beside it);
  tree:   the tree screen (Alt+T) built for all 1,000 messages and painted.

The target (issue 21): open, draw and switch each within 100 ms of UI-thread time. The same is
measured on a session of the first branch alone (10 messages, no siblings: no switch) for
comparison: what a tree adds to opening and drawing is the difference.

    .venv/bin/python benchmarks/tree_ui.py [--switches 10]
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


async def measure(app, switches: int) -> dict[str, list[float]]:
    from chatapp.ui.messages import BranchChanged, SessionOpened
    from chatapp.ui.screens.tree import TreeScreen
    from chatapp.ui.session_control import show_conversation
    from chatapp.ui.widgets.transcript import Transcript

    figures: dict[str, list[float]] = {"open": [], "draw": [], "switch": [], "switch wall": [], "tree": []}
    seen: list = []
    marks: dict[str, float] = {}

    def hook(message) -> None:
        seen.append(message)
        if isinstance(message, SessionOpened):
            marks["opened"] = time.thread_time()

    async def settle(pilot, predicate, timeout=120.0):
        deadline = time.monotonic() + timeout
        while not predicate():
            if time.monotonic() > deadline:
                raise SystemExit("timed out")
            await pilot.pause(0.01)
        await pilot.pause()

    async with app.run_test(size=(140, 44), message_hook=hook) as pilot:
        await settle(pilot, lambda: "opened" in marks and not app.session_busy)
        figures["open"].append((time.thread_time() - marks["opened"]) * 1000)
        transcript = app.query_one(Transcript)
        for _ in range(3):
            started = time.thread_time()
            await show_conversation(transcript, app.engine)
            await pilot.pause()
            figures["draw"].append((time.thread_time() - started) * 1000)
        for n in range(switches if transcript.messages()[1].siblings > 1 else 0):
            transcript.select(transcript.messages()[2 if n % 2 else 1])  # a fork's child: 2 or 20 siblings
            done = sum(isinstance(m, BranchChanged) for m in seen)
            started, wall = time.thread_time(), time.perf_counter()
            await pilot.press("alt+right")
            await settle(pilot, lambda: sum(isinstance(m, BranchChanged) for m in seen) > done
                         and not any(w.group == "branch" and w.is_running for w in app.workers))
            figures["switch"].append((time.thread_time() - started) * 1000)
            figures["switch wall"].append((time.perf_counter() - wall) * 1000)
        started = time.thread_time()
        await pilot.press("alt+t")
        await settle(pilot, lambda: isinstance(app.screen, TreeScreen))
        figures["tree"].append((time.thread_time() - started) * 1000)
        figures["path messages"] = [len(transcript.messages())]
        figures = {name: values for name, values in figures.items() if values}
    return figures


def run(branches: int, switches: int) -> dict[str, list[float]]:
    from chatapp.config import Settings
    from chatapp.engine.models.catalog import load_catalog
    from chatapp.engine.models.resolve import resolve_model
    from chatapp.engine.opening import open_engine
    from chatapp.engine.sessions import SessionManager
    from chatapp.ui.app import ChatApp

    model = str(resolve_model(load_catalog().default))
    settings = Settings().replace(n_ctx=4096, temperature=0.0)
    tree = build_tree(branches)
    engine = open_engine(settings, model)
    engine.load_conversation(engine.messages[:1] + tree.messages(), leaf=tree.leaf)
    manager = SessionManager.open(settings)
    name = f"big{branches}"
    manager.resume(name, engine).save_now()
    engine.close()
    app = ChatApp(open_engine(settings, model), settings=settings, session=name, sessions=manager)
    try:
        return asyncio.run(measure(app, switches))
    finally:
        app.release_engine()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--switches", type=int, default=10)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as home:
        for var in ("XDG_DATA_HOME", "XDG_CONFIG_HOME", "XDG_CACHE_HOME"):
            os.environ[var] = str(Path(home) / var.lower())
        results = {"1,000 messages in 100 branches": run(100, args.switches),
                   "10 messages, one path": run(1, 0)}
    print("UI-thread CPU time, ms (median, max); target: open, draw and switch each <= 100 ms")
    for title, figures in results.items():
        print(f"{title}; the shown path has {figures.pop('path messages')[0]} messages")
        for name, values in figures.items():
            print(f"  {name:12s} {statistics.median(values):8.1f} {max(values):8.1f}   (n={len(values)})")


if __name__ == "__main__":
    main()
