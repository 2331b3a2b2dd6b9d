"""One truth on screen, in a real terminal: chatapp in tmux, driven by the keys a user presses,
through an edit and a switch back to the first branch; then the screen is read and the switch's
notice, the KV panel and the Model panel must give the branch the same figures.

A fresh home (XDG folders in a temp dir), 2 threads, greedy. The flow: two questions, Alt+Up
twice to select the second, the palette's "Edit selected question" (Alt+E is for issue 34), text
added and Enter (branch 2/2), then Alt+Left back to branch 1/2, restored from memory. What is
read from the screen:

  notice:  "restored branch 1/2 (N tokens): C in … ms from memory"
  KV:      "branch: N tok   C restored from memory" and "C' / 1,024 cells"
  Model:   "KV now … C' tok" (F3 to the Model panel)

and it checks N, C and C' agree (C' is the cells in use: C, or more while cells of the branch
left stay for the next turn to overwrite, which the KV panel then says). Exit 1 on a mismatch.

    .venv/bin/python benchmarks/one_truth_tmux.py
"""

from __future__ import annotations

import os
import re
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from terminal import Terminal

CHATAPP = str(Path(sys.executable).with_name("chatapp"))
TURN_S = 120.0


def number(text: str) -> int:
    return int(text.replace(",", ""))


def turn(term: Terminal, question: str, turns_before: int) -> None:
    term.type(question)
    term.keys("Enter")
    deadline = time.monotonic() + TURN_S
    while time.monotonic() < deadline:  # the KV panel's "this turn wrote" line comes with each record
        screen = term.screen()
        if "generating" not in screen and "prefill" not in screen.split("\n")[0] and "this turn wrote" in screen \
                and term.screen(history=True).count("assistant ·") >= turns_before + 1:
            return
        time.sleep(0.2)
    raise TimeoutError(f"no reply to {question!r}:\n{term.screen()}")


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="chatapp-truth-") as home:
        env = {var: str(Path(home) / name) for var, name in
               (("XDG_CONFIG_HOME", "config"), ("XDG_DATA_HOME", "data"), ("XDG_CACHE_HOME", "cache"))}
        env |= {"HOME": home, "TERM": os.environ.get("TERM", "xterm-256color")}
        if model := os.environ.get("CHATAPP_MODEL"):
            env["CHATAPP_MODEL"] = model
        config = Path(env["XDG_CONFIG_HOME"]) / "chatapp" / "config.toml"
        config.parent.mkdir(parents=True)
        config.write_text("threads = 2\ntemperature = 0.0\n")
        term = Terminal("one-truth", [CHATAPP, "--ctx", "1024"], env, width=160, height=48)
        try:
            term.wait_for("KV cache", 60)
            turn(term, "Name a colour.", 0)
            turn(term, "Name a fruit.", 1)
            term.keys("M-Up")
            term.keys("M-Up")  # the second question
            term.keys("C-p")
            term.wait_for("Search", 10)
            term.type("Edit selected question")
            time.sleep(0.5)
            term.keys("Enter")
            term.wait_for("editing question", 10)
            term.keys("End")
            term.type(" Or a vegetable.")
            term.keys("Enter")
            term.wait_for("up to your edit", TURN_S)  # the edit's turn is over: its cost is in the panels
            term.keys("M-Left")
            screen = term.wait_for("restored branch 1/2", 30)
            time.sleep(0.5)
            screen = term.screen()
            notice = re.search(r"restored branch 1/2 \(([\d,]+) tokens\): ([\d,]+) in", screen)
            branch = re.search(r"branch: ([\d,]+) tok\s+\(?([\d,]+) restored from memory", screen)
            cells = re.search(r"([\d,]+) / 1,024 cells", screen)
            term.keys("F3", "F3", "F3")  # Tokens → KV → Speed → Quant (the Model panel)
            deadline, kv_now = time.monotonic() + 15, None
            while kv_now is None and time.monotonic() < deadline:  # a toast may cover it for a while
                time.sleep(0.5)
                model_screen = term.screen()
                kv_now = re.search(r"KV now +\S+ \S+ \(([\d,]+) tok\)", model_screen)
            print(screen)
            print(model_screen)
            if not (notice and branch and cells and kv_now):
                print("could not read every figure from the screen", file=sys.stderr)
                return 1
            figures = {"notice tokens": number(notice[1]), "notice restored": number(notice[2]),
                       "KV panel branch tokens": number(branch[1]), "KV panel restored": number(branch[2]),
                       "KV panel cells": number(cells[1]), "Model panel KV now": number(kv_now[1])}
            for name, value in figures.items():
                print(f"{name:>24}: {value:,}")
            agree = (figures["notice tokens"] == figures["KV panel branch tokens"]
                     and figures["notice restored"] == figures["KV panel restored"]
                     and figures["KV panel cells"] == figures["Model panel KV now"] >= figures["KV panel restored"])
            print("one truth: the notice, the KV panel and the Model panel agree" if agree
                  else "MISMATCH between the notice and the panels")
            return 0 if agree else 1
        finally:
            term.close()


if __name__ == "__main__":
    sys.exit(main())
