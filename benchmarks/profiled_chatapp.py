"""`chatapp` with its main thread (the TUI's event loop) under cProfile, only while asked.

    python benchmarks/profiled_chatapp.py OUT.prof chat --session NAME

SIGUSR1 starts the profiler, a second SIGUSR1 stops it (benchmarks/tui_vs_llama_cli.py
--profile brackets one turn this way); the statistics go to OUT.prof when chatapp exits.
Only the main thread is profiled: the decode worker and llama.cpp are not.
"""

import cProfile
import signal
import sys

from chatapp.cli import main

out, sys.argv = sys.argv[1], ["chatapp", *sys.argv[2:]]
profiler = cProfile.Profile()
running = False


def toggle(_signum, _frame) -> None:  # signal handlers run on the main thread: the one profiled
    global running
    profiler.disable() if running else profiler.enable()
    running = not running


signal.signal(signal.SIGUSR1, toggle)
try:
    main()
finally:
    profiler.disable()
    profiler.dump_stats(out)
