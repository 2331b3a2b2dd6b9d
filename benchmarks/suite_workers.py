"""The test suite on one worker and on two (pytest-xdist), on the same sample of test files.

Needs pytest-xdist (`.venv/bin/pip install pytest-xdist`; not a dependency: `make test` runs on
one worker, benchmarks/README.md says why). A sample of every 7th test file (in sorted
order; 28 of 200 files on 2026-12-07), run alternately on one worker and on two, with each run's
wall time and the CPU time its processes used (user + system, children included). A worker alone
leaves a core idle while it waits on a child process, a TUI's frames or a server's start.

    .venv/bin/python benchmarks/suite_workers.py [--rounds N] [--every K]

Takes about 7 minutes a round on 2 cores; needs the machine to itself.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def sample(every: int) -> list[str]:
    files = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "tests").rglob("test_*.py"))
    return files[every - 1::every]


def run(files: list[str], workers: int) -> tuple[float, float, str]:
    """(wall s, CPU s, pytest's last line) of one run."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    args = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--durations=0"]
    if workers > 1:
        args += ["-n", str(workers)]
    done = subprocess.run(args + files, cwd=ROOT, capture_output=True, text=True, env={**os.environ, "CI": "true"})
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    last = next((line for line in reversed(done.stdout.splitlines()) if " in " in line), "?")
    return wall, cpu, last.strip("= ")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--every", type=int, default=7)
    options = parser.parse_args()
    files = sample(options.every)
    print(f"sample: {len(files)} test files (every {options.every}th)")
    for round_ in range(1, options.rounds + 1):
        for workers in (1, 2):
            wall, cpu, last = run(files, workers)
            print(f"round {round_}, {workers} worker{'s' * (workers > 1)}: {wall:.0f} s wall, {cpu:.0f} s CPU "
                  f"({cpu / wall:.2f} cores busy on average): {last}")


if __name__ == "__main__":
    main()
