"""Opening a session whose transcript is far larger than the context.

A one-turn session is saved by the real `chatapp ask` on the default model; then its user
message is replaced, with sqlite3 as a user could, by MB megabytes of prose. Each command
below runs as its own process, and is timed from start to exit with its peak resident
memory (from wait4, so the figure is that process's alone):

  ask --session (resume, then one more turn: what fits of the transcript is re-prefilled);
  sessions show; sessions export --format json (the whole transcript, to /dev/null).

The goal: resuming costs time and memory in proportion to what fits in the context, not to
the transcript (a 10 MB row: under 5 s and 500 MB).

    .venv/bin/python benchmarks/huge_session.py [--mb 10] [--ctx 1024] [--limit 300]
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from chatapp.engine.models.catalog import load_catalog
from chatapp.engine.models.resolve import resolve_model

CHATAPP = Path(sys.executable).with_name("chatapp")
PROSE = "The keeper climbed the stairs at dusk, trimmed the wick and wrote the weather in the log. "


def run(args: list[str], env: dict[str, str], limit: float) -> tuple[float, float, int, str]:
    """(seconds, peak MiB, exit status, last line of stderr) of one chatapp process."""
    with tempfile.TemporaryFile() as err:
        started = time.perf_counter()
        proc = subprocess.Popen([str(CHATAPP), *args], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=err, env=env)
        deadline = started + limit
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.perf_counter() > deadline:
                proc.kill()
                _, status, usage = os.wait4(proc.pid, 0)
                break
            time.sleep(0.05)
        seconds = time.perf_counter() - started
        err.seek(0)
        lines = err.read().decode(errors="replace").strip().splitlines()
    code = os.waitstatus_to_exitcode(status)
    return seconds, usage.ru_maxrss / 1024, code, lines[-1] if lines else ""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mb", type=float, default=10.0, help="size of the edited message, in MB")
    parser.add_argument("--ctx", type=int, default=1024)
    parser.add_argument("--limit", type=float, default=300.0, help="seconds before a command is killed")
    args = parser.parse_args()
    model = resolve_model(load_catalog().default)
    with tempfile.TemporaryDirectory(prefix="chatapp-huge-") as tmp:
        home = Path(tmp)
        env = {**os.environ, "CHATAPP_MODEL": str(model), "COLUMNS": "120"}
        for var, folder in (("XDG_CONFIG_HOME", "config"), ("XDG_DATA_HOME", "data"), ("XDG_CACHE_HOME", "cache")):
            env[var] = str(home / folder)
        turn = ["--ctx", str(args.ctx), "--threads", "1", "--temperature", "0", "--max-tokens", "8"]
        seconds, peak, code, last = run(["ask", "--session", "big", "Name a colour.", *turn], env, args.limit)
        assert code == 0, last
        print(f"baseline: ask --session on a one-turn session: {seconds:.1f} s, {peak:,.0f} MiB peak")

        size = int(args.mb * 1_000_000)
        text = (PROSE * (size // len(PROSE) + 1))[:size]
        db = home / "data" / "chatapp" / "sessions" / "sessions.db"
        with sqlite3.connect(db) as conn:
            conn.execute("UPDATE messages SET content = ? WHERE idx = 1", (text,))
        print(f"message 1 replaced by {size / 1e6:,.1f} MB of prose")

        for label, command in (
                ("ask --session", ["ask", "--session", "big", "Name another one.", *turn]),
                ("sessions show", ["sessions", "show", "big"]),
                ("sessions export --format json", ["sessions", "export", "big", "--format", "json"])):
            seconds, peak, code, last = run(command, env, args.limit)
            state = "killed at the limit" if code in (-9, 137) else f"exit {code}"
            print(f"{label}: {seconds:.1f} s, {peak:,.0f} MiB peak, {state}")
            if last:
                print(f"    stderr's last line: {last[:160]}")


if __name__ == "__main__":
    main()
