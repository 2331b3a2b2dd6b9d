"""chatapp's TUI against llama.cpp's own `llama-cli`, in a real terminal, at default settings.

Both run in tmux windows of 160x50 (chatapp's four panels visible), on the same model, the
same system prompt and user prompt, greedy, the same reply length; each pair is one fresh
process of each, in alternating order, and the figure is the median of the pairs' ratios
(absolute speeds on a 2-core machine swing 2x from minute to minute; paired ratios do not).
Each side's own figures are read: chatapp's turn record from its session journal (llama.cpp's
counters), llama-cli's "[ Prompt: X t/s | Generation: Y t/s ]" line.

Cases:
  decode   a story prompt, 512 reply tokens; target: TUI decode >= 0.90 x llama-cli Generation
  prefill  a ~1,500-token prompt, pasted; target: TUI prefill >= 0.90 x llama-cli Prompt
  long     turn 30 of a chat (29 earlier turns on screen and in the context), 512 reply tokens;
           llama-cli gets the same history as its prompt. Target as for decode.
Also printed: the chatapp process's UI thread CPU as a share of the turn, the threads chatapp
chose, and its prefill and decode tok/s.
  start    launch of the real `chatapp` to the composer on screen, in the same window.

    .venv/bin/python benchmarks/tui_vs_llama_cli.py [--case decode,prefill,long] [--runs 6]
    .venv/bin/python benchmarks/tui_vs_llama_cli.py --profile   # where the UI thread's CPU goes

llama-cli comes from chatapp.llama_tools (built once from the bindings' own llama.cpp).
"""

from __future__ import annotations

import argparse
import json
import os
import pstats
import re
import signal
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

from chatapp.config import Settings
from chatapp.engine.events import Message
from chatapp.engine.models import resolve_model
from chatapp.engine.sessions import SessionManager
from chatapp.engine.sessions.store import ModelIdentity, Snapshot
from chatapp.llama_tools import ensure_tools
from chatapp.ui.widgets.composer import PLACEHOLDER
from terminal import Terminal  # benchmarks/ is on sys.path when a script there runs

SYSTEM = Settings().system_prompt
STORY = "Write a long, detailed story about a lighthouse keeper who finds a message in a bottle."
QUESTION = "Now write another long story, about the keeper's daughter, in many chapters."
CHATAPP = Path(sys.executable).with_name("chatapp")
PROFILED = Path(__file__).with_name("profiled_chatapp.py")
READY = PLACEHOLDER[1:24]
TIMINGS = re.compile(r"\[ Prompt: ([\d.]+) t/s \| Generation: ([\d.]+) t/s \]")
REPLIES = [
    "Here is what I know:\n\n- **Lighthouses** guide ships at night.\n- Their lamps turn so the light sweeps.\n"
    "- Each has its own pattern of flashes.\n\nKeepers once lived in them.",
    "```python\ndef sort_words(words):\n    return sorted(words, key=str.lower)\n```\n\nThis sorts "
    "case-insensitively; `sorted` returns a new list.",
    "## The sea\n\nWaves roll in, grey and slow,\nthe gulls cry where the cold winds blow.\n\n"
    "1. Tide\n2. Foam\n3. Salt",
]


def long_prompt(tokens: int = 1500) -> str:
    """About `tokens` tokens of plain prose for the default model's tokenizer (~11 per line)."""
    lines = [f"Line {i}: the keeper climbed the {i % 7 + 2} flights of stairs and trimmed the wick again."
             for i in range(tokens // 19)]
    return "Summarise this log in three sentences.\n\n" + "\n".join(lines)


def history(turns: int) -> list[Message]:
    messages = [Message("system", SYSTEM)]
    for i in range(turns):
        messages += [Message("user", f"Question {i + 1}: tell me something short about the sea."),
                     Message("assistant", REPLIES[i % len(REPLIES)])]
    return messages


# --- chatapp ---------------------------------------------------------------------------
def chatapp_env(home: Path, model: Path, max_tokens: int) -> dict[str, str]:
    config = home / "config" / "chatapp" / "config.toml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(f"temperature = 0.0\nmax_tokens = {max_tokens}\n")  # greedy; all else default
    return {"XDG_CONFIG_HOME": str(home / "config"), "XDG_DATA_HOME": str(home / "data"),
            "XDG_CACHE_HOME": str(home / "cache"), "CHATAPP_MODEL": str(model), "TERM": "xterm-256color"}


def seed_session(home: Path, messages: list[Message]) -> None:
    """A saved session holding `messages` (no KV state: chatapp prefills it on the next turn)."""
    settings = Settings()
    manager = SessionManager.open(settings, home / "data" / "chatapp" / "sessions")
    identity = ModelIdentity("smollm2-135m-instruct", "", "", "Q4_1")
    manager.store.save(Snapshot("bench", identity, messages, 1, 0))


def last_record(home: Path, after: int) -> dict | None:
    db = home / "data" / "chatapp" / "sessions" / "sessions.db"
    if not db.exists():
        return None
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        rows = conn.execute("SELECT record FROM turns ORDER BY created_at").fetchall()
    return json.loads(rows[-1][0]) if len(rows) > after else None


def chatapp_turn(model: Path, text: str, *, paste: bool, seed: list[Message] | None = None,
                 profile: Path | None = None) -> dict:
    with tempfile.TemporaryDirectory(prefix="chatapp-bench-") as tmp:
        home = Path(tmp)
        env = chatapp_env(home, model, 512)
        before = 0
        if seed:
            seed_session(home, seed)
            before = 0
        command = [str(CHATAPP), "chat", "--session", "bench"]
        if profile is not None:
            command = [sys.executable, str(PROFILED), str(profile), "chat", "--session", "bench"]
        term = Terminal("chatapp", command, env)
        try:
            term.wait_for(READY, 120)
            if seed:
                term.wait_for("session bench", 60)  # the resume notice: the transcript is on screen
            (term.paste if paste else term.type)(text)
            time.sleep(0.3)
            if profile is not None:
                os.kill(term.pid, signal.SIGUSR1)  # profile from here to the end of the turn
            cpu0, wall0 = term.thread_cpu(), time.monotonic()
            term.keys("Enter")
            record = None
            while record is None:
                if not term.alive:
                    raise RuntimeError(f"chatapp exited:\n{term.screen()}")
                time.sleep(0.1)
                record = last_record(home, before)
            cpu1, wall1 = term.thread_cpu(), time.monotonic()
            if profile is not None:
                os.kill(term.pid, signal.SIGUSR1)
            term.keys("C-q")
            term.wait_exit(30)
        finally:
            term.close()
    ui = term.pid  # the main thread runs Textual's loop
    record["ui_cpu_share"] = (cpu1.get(ui, 0) - cpu0.get(ui, 0)) / (wall1 - wall0)
    record["process_cpu"] = (sum(cpu1.values()) - sum(cpu0.values())) / (wall1 - wall0)
    return record


# --- llama-cli -------------------------------------------------------------------------
def llama_cli_turn(model: Path, text: str) -> tuple[float, float]:
    """(prompt t/s, generation t/s) as llama-cli prints them, at its defaults plus greedy."""
    cli = ensure_tools() / "llama-cli"
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
        f.write(text)
    command = [str(cli), "-m", str(model), "-sys", SYSTEM, "-f", f.name, "-n", "512", "--temp", "0", "-st"]
    term = Terminal("llama-cli", command, {"TERM": "xterm-256color"})
    try:
        term.wait_exit(300)
        shown = term.screen(history=True)
    finally:
        term.close()
        Path(f.name).unlink()
    found = TIMINGS.search(shown)
    if not found:
        raise RuntimeError(f"llama-cli printed no timings:\n{shown[-2000:]}")
    return float(found[1]), float(found[2])


# --- cases -----------------------------------------------------------------------------
def case_inputs(case: str) -> tuple[str, str, list[Message] | None, bool]:
    """(chatapp's typed text, llama-cli's prompt, seeded history, paste?)."""
    if case == "decode":
        return STORY, STORY, None, False
    if case == "prefill":
        text = long_prompt()
        return text, text, None, True
    seed = history(29)
    transcript = "\n\n".join(f"{m.role}: {m.content}" for m in seed[1:])
    return QUESTION, f"{transcript}\n\nuser: {QUESTION}", seed, False


def run_case(case: str, model: Path, runs: int) -> None:
    typed, cli_prompt, seed, paste = case_inputs(case)
    key = "prefill_tps" if case == "prefill" else "decode_tps"
    ratios, ui, rows = [], [], []
    for run in range(runs):
        if run % 2:
            cli = llama_cli_turn(model, cli_prompt)
            ours = chatapp_turn(model, typed, paste=paste, seed=seed)
        else:
            ours = chatapp_turn(model, typed, paste=paste, seed=seed)
            cli = llama_cli_turn(model, cli_prompt)
        theirs = cli[0] if case == "prefill" else cli[1]
        ratios.append(ours[key] / theirs)
        ui.append(ours["ui_cpu_share"])
        rows.append((ours, cli))
        print(f"  {case} pair {run + 1}: chatapp {ours[key]:7.1f} tok/s (prefill {ours['prefill_tps']:.0f}, "
              f"decode {ours['decode_tps']:.1f}, {ours['decode_tokens']} tok, threads "
              f"{ours.get('threads', '?')}/{ours.get('threads_batch', '?')})  llama-cli {theirs:7.1f} t/s  "
              f"ratio {ratios[-1]:.3f}  UI thread {ui[-1]:.1%} of a core", flush=True)
    target = "prefill" if case == "prefill" else "decode"
    print(f"{case}: chatapp/llama-cli {target} = {statistics.median(ratios):.3f} (median of {runs} pairs; "
          f"{min(ratios):.3f}-{max(ratios):.3f}; target >= 0.90); UI thread median {statistics.median(ui):.1%} "
          f"of a core while the turn ran", flush=True)


def start_times(model: Path, runs: int) -> None:
    times = []
    for _ in range(runs):
        with tempfile.TemporaryDirectory(prefix="chatapp-bench-") as tmp:
            started = time.monotonic()
            term = Terminal("chatapp", [str(CHATAPP), "chat"], chatapp_env(Path(tmp), model, 512))
            try:
                term.wait_for(READY, 120)
                times.append(time.monotonic() - started)
                term.keys("C-q")
                term.wait_exit(30)
            finally:
                term.close()
    print(f"start: launch to composer median {statistics.median(times):.2f} s "
          f"({min(times):.2f}-{max(times):.2f}, {runs} runs)", flush=True)


def profile(model: Path, case: str) -> None:
    typed, _, seed, paste = case_inputs(case)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "ui.prof"
        record = chatapp_turn(model, typed, paste=paste, seed=seed, profile=out)
        print(f"{case}: decode {record['decode_tps']:.1f} tok/s, UI thread {record['ui_cpu_share']:.1%} of a core "
              "(under cProfile, which slows the UI thread)")
        stats = pstats.Stats(str(out))
        stats.sort_stats("tottime").print_stats(25)
        stats.sort_stats("cumulative").print_stats(40)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", default="decode,prefill,long")
    parser.add_argument("--runs", type=int, default=6)
    parser.add_argument("--profile", action="store_true", help="profile the UI thread in one TUI turn per case")
    args = parser.parse_args()
    model = resolve_model()
    ensure_tools()
    for case in args.case.split(","):
        if case == "start":
            start_times(model, args.runs)
        elif args.profile:
            profile(model, case)
        else:
            run_case(case, model, args.runs)


if __name__ == "__main__":
    main()
