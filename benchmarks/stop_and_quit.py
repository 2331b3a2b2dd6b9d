"""How fast chatapp stops and quits, in every phase of a turn, as a user sees it.

In a tmux window of 160x50, the real `chatapp chat`:
  Esc during prefill (a ~3,000-token paste) and during decode: seconds from the key to the
      "stopped" note on screen (target <= 0.5 s);
  Ctrl+Q during prefill and during decode: seconds from the key to the process's exit, and
      whether the session kept the turn (target <= 1 s).
And `chatapp ask`: seconds from Ctrl+C (SIGINT) to exit, during prefill and during decode.

    .venv/bin/python benchmarks/stop_and_quit.py [--runs 3]
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from chatapp.engine.models.resolve import resolve_model
from terminal import Terminal  # benchmarks/ is on sys.path when a script there runs
from tui_vs_llama_cli import CHATAPP, READY, STORY, chatapp_env, last_record

LONG = " ".join(f"Line {i}: the keeper trimmed the wick and wrote in the log." for i in range(170))
STOPPED = "■ stopped"


def tui(model: Path, phase: str, key: str) -> tuple[float, bool]:
    """(seconds from `key` to its effect, whether the session kept the turn)."""
    with tempfile.TemporaryDirectory(prefix="chatapp-stop-") as tmp:
        home = Path(tmp)
        term = Terminal("stop", [str(CHATAPP), "chat", "--session", "stop"], chatapp_env(home, model, 512))
        try:
            term.wait_for(READY, 120)
            if phase == "prefill":
                term.paste(LONG)
                time.sleep(0.3)
                term.keys("Enter")
                term.wait_for("prefill ", 60)  # the header's live prefill progress
            else:
                term.type(STORY)
                term.keys("Enter")
                term.wait_for("decode ", 60)  # the Speed panel's live decode figures
                time.sleep(0.5)
            start = time.monotonic()
            term.keys(key)
            if key == "Escape":
                term.wait_for(STOPPED, 30)
                took = time.monotonic() - start
                term.keys("C-q")
                term.wait_exit(30)
            else:
                took = term.wait_exit(30)
        finally:
            term.close()
        record = last_record(home, 0)
    return took, record is not None and record.get("finish_reason") == "stopped"


def ask(model: Path, phase: str) -> float:
    """Seconds from SIGINT to the exit of `chatapp ask` in `phase`."""
    prompt = LONG if phase == "prefill" else STORY
    with tempfile.TemporaryDirectory(prefix="chatapp-stop-") as tmp:
        env = {**os.environ, **chatapp_env(Path(tmp), model, 512)}
        proc = subprocess.Popen([str(CHATAPP), "ask", "--json", prompt], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, env=env)
        # Loaded by then; a ~3,000-token prefill takes several seconds, and a 512-token reply too.
        time.sleep(2.0)
        start = time.monotonic()
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=60)
        return time.monotonic() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    model = resolve_model()
    for phase in ("prefill", "decode"):
        for key, label, target in (("Escape", "Esc -> stopped note", 0.5), ("C-q", "Ctrl+Q -> exit", 1.0)):
            runs = [tui(model, phase, key) for _ in range(args.runs)]
            times = [t for t, _ in runs]
            kept = all(k for _, k in runs)
            print(f"TUI {phase:7} {label:20} median {statistics.median(times):.2f} s (max {max(times):.2f}; "
                  f"target <= {target} s); the session kept the stopped turn: {'yes' if kept else 'NO'}", flush=True)
        times = [ask(model, phase) for _ in range(args.runs)]
        print(f"ask {phase:7} Ctrl+C -> exit       median {statistics.median(times):.2f} s "
              f"(max {max(times):.2f}; target <= 1 s)", flush=True)


if __name__ == "__main__":
    main()
