"""chatapp's TUI against llama.cpp's own `llama-cli`, in a real terminal, like for like.

Both run in tmux windows of 160x50 (chatapp's four panels visible), on the same model, the
same system prompt and user prompt, greedy, the same reply length; each pair is one fresh
process of each, in alternating order, and the figure is the median of the pairs' ratios
(absolute speeds on a 2-core machine swing 2x from minute to minute; paired ratios do not).
Each side's own figures are read: chatapp's turn record from its session journal, llama-cli's
"[ Prompt: X t/s | Generation: Y t/s ]" line. Decode is compared by wall time on both sides:
llama-cli's Generation is its server's decode steps over the time from the first token to the
last (`n_gen_tps`, sampling and all), so chatapp's figure is its decode steps over its decode
loop's wall time (`decode_wall_ms`). llama.cpp's counters, which the Speed panel and
`decode_tps` show, count only the time inside llama_decode; until 2026-12-05 this script
compared those, which read the TUI about 4% ahead of what it was. Prefill is chatapp's
counters against llama-cli's wall time from the task's start to the prompt's end, a few batches
whose gaps are small beside their time. That line has no token
counts, so llama-cli also runs with `-lv 3` and its stderr in a file (the screen is unchanged:
at its default verbosity it writes nothing there): its server's "prompt eval time = ... / N
tokens" and "eval time = ... / N tokens" lines give the prompt and reply lengths. Each pair
prints both sides' lengths, and the run stops if a reply is not 512 tokens (decode, long) or
chatapp's prompt is not ~1,500 tokens (prefill).

Cases:
  decode   a story prompt, 512 reply tokens; target: TUI decode >= 0.90 x llama-cli Generation
  prefill  a ~1,500-token prompt, pasted; target: TUI prefill >= 0.90 x llama-cli Prompt
  long     turn 30 of a chat (29 earlier turns on screen and in the context), 512 reply tokens;
           llama-cli gets the same history as its prompt. Target as for decode.
Also printed: the chatapp process's UI thread CPU as a share of the turn, the threads chatapp
chose, and its prefill and decode tok/s.
  start    launch of the real `chatapp` to the composer on screen, in the same window.
  typing   20 KB arriving as typed keys (a terminal without bracketed paste: `tmux send-keys -l`
           in pieces, never `paste-buffer -p`), from the first key sent to its end on screen in
           the composer; target <= 2 s. Then the composer must start with the text's start
           (PageUp), and the Tokens panel's live count, when in view, must count all of it.

--settings matched (the default) runs both at the same settings: flash attention off (chatapp's
default for an f16 cache on the CPU), an f16 cache and `--threads` threads (default 2) for decode
and batches, in chatapp's config and as llama-cli's -fa/-ctk/-ctv/-t/-tb. --settings defaults runs
each at its own defaults (llama-cli's -fa auto turns flash attention on, which loses past 256
cells on this CPU, and chatapp picks its thread count): the comparison is then not like for like,
and is labelled so.

--against-itself runs llama-cli against llama-cli instead, pair by pair as above (an A/A check):
how far one program reads from itself on this machine, so that a pair of chatapp's below 0.92 can
be read against what llama-cli's own pairs do; --against-itself chatapp does the same with the TUI.

--busy runs one CPU-bound process (a python busy loop) through each pair, so both sides face
the same load (the machine shared with other work). llama-cli's two spinning threads then share
one core and it has run at 0.3-2.8 t/s here: `--cli-limit` seconds (default 900) bound its wait,
and a llama-cli that has not finished by then counts at 512 tokens over the limit, an upper
bound on its speed, so the pair's ratio is a lower bound (printed with ">").

    .venv/bin/python benchmarks/tui_vs_llama_cli.py [--case decode,prefill,long] [--runs 6] [--busy]
    .venv/bin/python benchmarks/tui_vs_llama_cli.py --case decode --runs 6 --settings defaults
    .venv/bin/python benchmarks/tui_vs_llama_cli.py --case decode --runs 2 --busy --cli-limit 300
    .venv/bin/python benchmarks/tui_vs_llama_cli.py --case start,typing
    .venv/bin/python benchmarks/tui_vs_llama_cli.py --profile   # where the UI thread's CPU goes

llama-cli comes from chatapp.llama_tools (built once from the bindings' own llama.cpp).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import pstats
import re
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from chatapp.config import Settings
from chatapp.engine.events import Message
from chatapp.engine.models.resolve import resolve_model
from chatapp.engine.sessions import SessionManager
from chatapp.engine.sessions.store import ModelIdentity, Snapshot
from chatapp.llama_tools import ensure_tools
from chatapp.ui.widgets.composer import PLACEHOLDER
from terminal import Terminal, fresh_home  # benchmarks/ is on sys.path when a script there runs

SYSTEM = Settings().system_prompt
STORY = "Write a long, detailed story about a lighthouse keeper who finds a message in a bottle."
QUESTION = "Now write another long story, about the keeper's daughter, in many chapters."
CHATAPP = Path(sys.executable).with_name("chatapp")
PROFILED = Path(__file__).with_name("profiled_chatapp.py")
READY = PLACEHOLDER[1:24]
TIMINGS = re.compile(r"\[ Prompt: ([\d.]+) t/s \| Generation: ([\d.]+) t/s \]")
EVAL_TOKENS = re.compile(r"(prompt eval|\s{2}eval) time = +[\d.]+ ms / +(\d+) tokens")
"""llama-cli's server, at -lv 3: the prompt tokens it processed, then the tokens it generated."""
REPLY_TOKENS = 512
PROMPT_TOKENS = (1350, 1650)
"""The prefill case's templated prompt, as chatapp's record counts it: ~1,500 tokens."""
TYPED_BYTES = 20 * 1024
TYPED_PIECE = 512
"""Characters per `send-keys -l` call (tmux keeps a command's arguments short)."""
TYPED_START, TYPED_END = "STARTOFTYPING", "ENDOFTYPING20K"
TYPING_TARGET_S = 2.0
COMPOSER_COUNT = re.compile(r"composer · ([\d,]+) tokens · ([\d,]+) chars")
BUSY = [sys.executable, "-c", "while True: pass"]
REPLIES = [
    "Here is what I know:\n\n- **Lighthouses** guide ships at night.\n- Their lamps turn so the light sweeps.\n"
    "- Each has its own pattern of flashes.\n\nKeepers once lived in them.",
    "```python\ndef sort_words(words):\n    return sorted(words, key=str.lower)\n```\n\nThis sorts "
    "case-insensitively; `sorted` returns a new list.",
    "## The sea\n\nWaves roll in, grey and slow,\nthe gulls cry where the cold winds blow.\n\n"
    "1. Tide\n2. Foam\n3. Salt",
]


def long_prompt(tokens: int = 1500) -> str:
    """About `tokens` tokens once templated with the default system prompt, for the default
    model's tokenizer: each line is ~21 tokens (19 below line 10), the rest ~20."""
    lines = [f"Line {i}: the keeper climbed the {i % 7 + 2} flights of stairs and trimmed the wick again."
             for i in range((tokens - 20) // 21)]
    return "Summarise this log in three sentences.\n\n" + "\n".join(lines)


def typed_text(size: int = TYPED_BYTES) -> str:
    """`size` characters of one line of prose (what a paste without bracketing types), from
    TYPED_START to TYPED_END. No hyphen or semicolon: tmux reads those in send-keys arguments."""
    words = " ".join(f"the keeper logged wave {i} at the rocks, and the lamp turned" for i in range(size // 40))
    body = f"{TYPED_START} {words}"[: size - len(TYPED_END) - 1]
    return f"{body} {TYPED_END}"


def check(ok: bool, message: str) -> None:
    """Stop the benchmark: its figures would not measure what the README says."""
    if not ok:
        raise SystemExit(f"tui_vs_llama_cli: {message}")


@contextlib.contextmanager
def load(busy: bool) -> Iterator[None]:
    """While the block runs, one CPU-bound process (when `busy`)."""
    if not busy:
        yield
        return
    spinner = subprocess.Popen(BUSY)
    try:
        time.sleep(0.5)  # running before either side starts
        yield
    finally:
        spinner.kill()
        spinner.wait()


def history(turns: int) -> list[Message]:
    messages = [Message("system", SYSTEM)]
    for i in range(turns):
        messages += [Message("user", f"Question {i + 1}: tell me something short about the sea."),
                     Message("assistant", REPLIES[i % len(REPLIES)])]
    return messages


# --- chatapp ---------------------------------------------------------------------------
@dataclass(frozen=True)
class Setup:
    """What each side runs at beyond greedy and the reply length."""
    label: str
    chatapp_config: str = ""
    cli_args: tuple[str, ...] = ()


def matched(threads: int) -> Setup:
    return Setup(f"matched: flash attention off, f16 cache, {threads} threads each",
                 f'flash_attn = "off"\nkv_type = "f16"\nthreads = {threads}\n',
                 ("-fa", "off", "-ctk", "f16", "-ctv", "f16", "-t", str(threads), "-tb", str(threads)))


DEFAULTS = Setup("each at its own defaults (not like for like: llama-cli turns flash attention on)")


def chatapp_env(home: Path, model: Path, max_tokens: int, setup: Setup = DEFAULTS) -> dict[str, str]:
    return fresh_home(home, model, f"temperature = 0.0\nmax_tokens = {max_tokens}\n{setup.chatapp_config}")  # greedy


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
                 profile: Path | None = None, setup: Setup = DEFAULTS) -> dict:
    with tempfile.TemporaryDirectory(prefix="chatapp-bench-") as tmp:
        home = Path(tmp)
        env = chatapp_env(home, model, 512, setup)
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
    # Decode steps over the decode loop's wall time, as llama-cli's Generation figure is (its
    # server's steps from the first token to the last, sampling and all): llama.cpp's own
    # counters (decode_tps) leave out what runs between two llama_decode calls.
    record["decode_wall_tps"] = record["decode_tokens"] / record["decode_wall_ms"] * 1000
    record["process_cpu"] = (sum(cpu1.values()) - sum(cpu0.values())) / (wall1 - wall0)
    return record


# --- llama-cli -------------------------------------------------------------------------
def llama_cli_turn(model: Path, text: str, limit: float = 900, bounded: bool = False,
                   setup: Setup = DEFAULTS) -> dict:
    """llama-cli's prompt and generation t/s as it prints them, at its defaults plus greedy, and
    its prompt and reply token counts from its log (stderr, in a file). `bounded`: a llama-cli
    still running after `limit` seconds is stopped and reported as at most 512 tokens over the
    limit ("bound": True), instead of failing the run."""
    cli = ensure_tools() / "llama-cli"
    with tempfile.TemporaryDirectory(prefix="llama-cli-bench-") as tmp:
        prompt, log = Path(tmp) / "prompt.txt", Path(tmp) / "stderr.log"
        prompt.write_text(text)
        command = [str(cli), "-m", str(model), "-sys", SYSTEM, "-f", str(prompt), "-n", str(REPLY_TOKENS),
                   "--temp", "0", "-st", "-lv", "3", *setup.cli_args]
        term = Terminal("llama-cli", ["sh", "-c", f'exec "$@" 2>"{log}"', "llama-cli", *command],
                        {"TERM": "xterm-256color"})
        try:
            try:
                term.wait_exit(limit)
            except TimeoutError:
                if not bounded:
                    raise
                return {"prompt_tps": 0.0, "gen_tps": REPLY_TOKENS / limit, "prompt_n": 0, "gen_n": REPLY_TOKENS,
                        "bound": True}
            shown = term.screen(history=True)
        finally:
            term.close()
        logged = log.read_text(errors="replace") if log.exists() else ""
    found = TIMINGS.search(shown)
    if not found:
        raise RuntimeError(f"llama-cli printed no timings:\n{shown[-2000:]}")
    counts = dict((kind.strip(), int(n)) for kind, n in EVAL_TOKENS.findall(logged))
    if len(counts) < 2:
        raise RuntimeError(f"llama-cli logged no token counts:\n{logged[-2000:]}")
    return {"prompt_tps": float(found[1]), "gen_tps": float(found[2]), "prompt_n": counts["prompt eval"],
            "gen_n": counts["eval"]}


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


def check_lengths(case: str, ours: dict, cli: dict) -> None:
    if case in ("decode", "long"):
        check(ours["generated_tokens"] == REPLY_TOKENS and ours["finish_reason"] == "length",
              f"{case}: chatapp's reply is {ours['generated_tokens']} tokens ({ours['finish_reason']}), "
              f"not {REPLY_TOKENS}")
        check(cli["gen_n"] == REPLY_TOKENS, f"{case}: llama-cli's reply is {cli['gen_n']} tokens, not {REPLY_TOKENS}")
    if case == "prefill":
        low, high = PROMPT_TOKENS
        check(low <= ours["prompt_tokens"] <= high and ours["prefill_tokens"] >= low,
              f"prefill: chatapp's prompt is {ours['prompt_tokens']} tokens ({ours['prefill_tokens']} prefilled), "
              f"not ~1,500 ({low}-{high})")


def run_case(case: str, model: Path, runs: int, busy: bool = False, cli_limit: float = 900,
             setup: Setup = DEFAULTS) -> None:
    typed, cli_prompt, seed, paste = case_inputs(case)
    bounded = busy and case != "prefill"  # a bound on a prefill rate would need its prompt count
    key = "prefill_tps" if case == "prefill" else "decode_wall_tps"
    label = f"{case} (busy: 1 CPU-bound process)" if busy else case
    print(f"{case}: {setup.label}", flush=True)
    ratios, ui, bounds = [], [], []
    for run in range(runs):
        with load(busy):
            if run % 2:
                cli = llama_cli_turn(model, cli_prompt, cli_limit, bounded, setup)
                ours = chatapp_turn(model, typed, paste=paste, seed=seed, setup=setup)
            else:
                ours = chatapp_turn(model, typed, paste=paste, seed=seed, setup=setup)
                cli = llama_cli_turn(model, cli_prompt, cli_limit, bounded, setup)
        theirs = cli["prompt_tps"] if case == "prefill" else cli["gen_tps"]
        ratios.append(ours[key] / theirs)
        ui.append(ours["ui_cpu_share"])
        bounds.append(bool(cli.get("bound")))
        if cli.get("bound"):
            print(f"  {label} pair {run + 1}: llama-cli had not finished its {REPLY_TOKENS} tokens after "
                  f"{cli_limit:g} s: < {theirs:.2f} t/s; the ratio below is a lower bound", flush=True)
        print(f"  {label} pair {run + 1}: chatapp {ours[key]:7.1f} tok/s (prefill {ours['prefill_tps']:.0f}, "
              f"decode {ours['decode_tps']:.1f} by llama.cpp's counters; prompt {ours['prompt_tokens']} tok, "
              f"{ours['prefill_tokens']} prefilled; reply {ours['generated_tokens']} tok, {ours['finish_reason']}; "
              f"threads {ours.get('threads', '?')}/{ours.get('threads_batch', '?')})  llama-cli {theirs:7.1f} t/s "
              f"(prompt {cli['prompt_n']} tok, reply {cli['gen_n']} tok)  ratio {'>' if cli.get('bound') else ''}"
              f"{ratios[-1]:.3f}  "
              f"UI thread {ui[-1]:.1%} of a core", flush=True)
        check_lengths(case, ours, cli)
    target = "prefill" if case == "prefill" else "decode"
    floor = ">= " if any(bounds) else ""  # a pair whose llama-cli ran out its limit gives a lower bound
    print(f"{label}: chatapp/llama-cli {target} = {floor}{statistics.median(ratios):.3f} (median of {runs} pairs; "
          f"{min(ratios):.3f}-{max(ratios):.3f}; {setup.label}); UI thread median {statistics.median(ui):.1%} "
          f"of a core while the turn ran", flush=True)


def against_itself(case: str, model: Path, runs: int, setup: Setup, side: str = "llama-cli") -> None:
    """One side's pairs with itself (`side`: llama-cli or chatapp), as `run_case` pairs chatapp
    with llama-cli: the method's own spread, to read the "no pair below 0.92" target against."""
    typed, cli_prompt, seed, paste = case_inputs(case)
    if side == "chatapp":
        key = "prefill_tps" if case == "prefill" else "decode_wall_tps"
        turn = lambda: chatapp_turn(model, typed, paste=paste, seed=seed, setup=setup)  # noqa: E731
    else:
        key = "prompt_tps" if case == "prefill" else "gen_tps"
        turn = lambda: llama_cli_turn(model, cli_prompt, setup=setup)  # noqa: E731
    print(f"{case}, {side} against itself: {setup.label}", flush=True)
    ratios = []
    for run in range(runs):
        first, second = turn(), turn()
        ratios.append(first[key] / second[key])
        print(f"  pair {run + 1}: {side} {first[key]:7.1f} tok/s, then {second[key]:7.1f} tok/s  ratio "
              f"{ratios[-1]:.3f}", flush=True)
    low = sum(r < 0.92 for r in ratios)
    print(f"{case}: {side}/{side} = {statistics.median(ratios):.3f} (median of {runs} pairs; "
          f"{min(ratios):.3f}-{max(ratios):.3f}; {low} pair(s) below 0.92; {setup.label})", flush=True)


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


def composer_rows(screen: str) -> str:
    """The composer's rows on `screen`: between the last full-width rule and the footer."""
    lines = screen.rstrip("\n").split("\n")
    rule = max((i for i, line in enumerate(lines) if line.strip() and set(line.strip()) == {"─"}), default=len(lines))
    return "\n".join(lines[rule + 1:-1])


def words(text: str) -> str:
    return " ".join(text.split())


def typing_run(model: Path, text: str) -> tuple[float, float, str]:
    """(seconds from the first key to the last one sent, and to the text's end in the composer,
    what the Tokens panel's live count said), after checking that the composer's rows show
    exactly the text's end, and after PageUp exactly its start."""
    with tempfile.TemporaryDirectory(prefix="chatapp-bench-") as tmp:
        term = Terminal("chatapp", [str(CHATAPP), "chat"], chatapp_env(Path(tmp), model, 512))
        try:
            term.wait_for(READY, 120)
            time.sleep(1.0)  # started and idle, as when a user pastes
            check(TYPED_END not in term.screen(), "typing: the end marker is on screen before any key")
            started = time.monotonic()
            for at in range(0, len(text), TYPED_PIECE):
                term.type(text[at:at + TYPED_PIECE])  # literal keys: no bracketed paste
            sent = time.monotonic() - started
            shown = term.screen()
            while TYPED_END not in composer_rows(shown):
                check(time.monotonic() - started < 120,
                      f"typing: the text's end not in the composer after 120 s:\n{shown}")
                check(term.alive, f"typing: chatapp exited:\n{shown}")
                time.sleep(0.02)  # each capture-pane is a process: polling flat out would take a core
                shown = term.screen()
            on_screen = time.monotonic() - started
            tail = words(composer_rows(shown))
            check(words(text).endswith(tail), f"typing: the composer's last rows are not the text's end:\n{tail}")
            # The Tokens panel's count, when its summary line is in view (the panel scrolls to the
            # end of the pieces as the composer grows, so it may not be).
            counted, deadline = "not in view", time.monotonic() + 10
            while time.monotonic() < deadline:
                found = COMPOSER_COUNT.search(term.screen())
                if found and int(found[2].replace(",", "")) == len(text):
                    counted = f"{found[1]} tokens, {found[2]} chars after {time.monotonic() - started:.2f} s"
                    break
                if found:  # the count is debounced and runs off the UI thread: it may lag
                    counted = f"still {found[2]} chars, not {len(text):,}, after 10 s"
                time.sleep(0.05)
            check(not counted.startswith("still"), f"typing: the Tokens panel {counted}")
            term.keys(*["PageUp"] * (len(text) // 1000))  # to the composer's first rows
            try:
                term.wait_for(TYPED_START, 30)
            except TimeoutError:
                check(False, f"typing: the text's start never came into view:\n{term.screen()}")
            head = words(composer_rows(term.screen()))
            check(head.startswith(TYPED_START) and words(text).startswith(head),
                  f"typing: the composer's first rows are not the text's start:\n{head}")
            term.keys("C-q")
            term.wait_exit(30)
        finally:
            term.close()
    return sent, on_screen, counted


def typing_times(model: Path, runs: int) -> None:
    text = typed_text()
    times = []
    for run in range(runs):
        sent, on_screen, counted = typing_run(model, text)
        times.append(on_screen)
        print(f"  typing run {run + 1}: {len(text):,} chars typed in pieces of {TYPED_PIECE} (all sent after "
              f"{sent:.2f} s); the end in the composer after {on_screen:.2f} s; its first and last rows are "
              f"the text's; Tokens panel count: {counted}", flush=True)
    print(f"typing: {len(text) // 1024} KB as typed keys to its end on screen, median {statistics.median(times):.2f} s "
          f"({min(times):.2f}-{max(times):.2f}, {runs} runs; target <= {TYPING_TARGET_S:g} s)", flush=True)


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
    parser.add_argument("--busy", action="store_true", help="one CPU-bound process runs through each pair")
    parser.add_argument("--cli-limit", type=float, default=900,
                        help="with --busy: seconds llama-cli may take before it counts at 512 tokens over them")
    parser.add_argument("--settings", choices=("matched", "defaults"), default="matched")
    parser.add_argument("--threads", type=int, default=2, help="with --settings matched: each side's threads")
    parser.add_argument("--against-itself", nargs="?", const="llama-cli", choices=("llama-cli", "chatapp"),
                        help="one side against itself, pair by pair (an A/A check of the method's spread; "
                             "llama-cli when no side is named)")
    args = parser.parse_args()
    setup = matched(args.threads) if args.settings == "matched" else DEFAULTS
    model = resolve_model()
    cases = args.case.split(",")
    if not set(cases) <= {"start", "typing"}:
        ensure_tools()
    for case in cases:
        if case == "start":
            start_times(model, args.runs)
        elif case == "typing":
            typing_times(model, args.runs)
        elif args.profile:
            profile(model, case)
        elif args.against_itself:
            against_itself(case, model, args.runs, setup, args.against_itself)
        else:
            run_case(case, model, args.runs, args.busy, args.cli_limit, setup)


if __name__ == "__main__":
    main()
