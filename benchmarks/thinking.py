"""Thinking models (issue 37): the targets, on the default model given a template shaped like
DeepSeek-R1's (its generation prompt opens the thought, earlier thoughts are cut from the
history), made in a temporary folder with the gguf package (tests.gguf_copy).

1. Stop and answer: a second thread calls Engine.answer_now while a thought streams, as the
   TUI's Ctrl+G does from the UI thread while the turn's worker decodes; the thought tokens the
   model sampled after the call. Target: at most 1. With the `tui` part, the same in the TUI:
   chatapp in tmux (a fresh home a run), sent Ctrl+G's byte while the thought streams; the turn
   record the session saved says how many thought tokens came after the key
   (`answer_now_extra_tokens`).
2. Think more: the tokens a think-more turn prefills. Target: 0.
3. The budget: thought tokens sampled past the budget, and thought tokens past it with the
   forced close counted. Target: 0, and no more than the close's own tokens.
4. Earlier thoughts: over a 5-turn conversation with each history choice, the re-prefill the
   engine predicts before each turn against what the turn measures. Target: equal +-1 on every
   turn; with "keep", turns 2-5 prefill only the question and the template's glue.
5. The thought parser's cost: paired decodes of the same greedy reply, with the steering and the
   thought/answer split on and off. Target: on/off decode speed >= 0.98 (median of the pairs).

    .venv/bin/python benchmarks/thinking.py [--runs 9] [--threads 2] [--tokens 160] [--parts parser,...]
    .venv/bin/python benchmarks/thinking.py --parts tui --runs 5
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

from chatapp.config import Settings
from chatapp.engine.backend import GenerationSettings
from chatapp.engine.chat.engine import Engine
from chatapp.engine.chat.thoughts import TurnSplit
from chatapp.engine.events import Generated, Message, TextDelta, ThoughtDelta
from chatapp.engine.local.backend import LocalBackend
from chatapp.engine.models.resolve import resolve_model
from chatapp.engine.thinking import Steering

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the template copies are made as the tests make them
from tests.engine.chat.thinking_templates import R1_SHAPED
from tests.gguf_copy import copies_with_templates

SYSTEM = "You are a concise assistant."
QUESTIONS = ("What is the capital of France?", "And of Italy?", "Which of the two is bigger?",
             "Name a river in it.", "Thanks, that is all.")


def open_engine(path: Path, args, **settings) -> Engine:
    chosen = Settings(n_ctx=2048, threads=args.threads, system_prompt=SYSTEM, **settings)
    engine = Engine(LocalBackend.load(path, chosen), chosen)
    engine.generation = GenerationSettings(temperature=0.0, max_tokens=settings.get("max_tokens", 48))
    return engine


def stop_and_answer(path: Path, args) -> list[int]:
    """Thought tokens sampled after answer_now, one figure a run (pressed after 2..runs+1 tokens)."""
    extra = []
    for run in range(args.runs):
        engine = open_engine(path, args, max_tokens=256)
        pressed, seen, at = threading.Event(), [0], [None]

        def press(engine=engine):  # another thread, as the TUI's key handler on the UI thread
            pressed.wait()
            at[0] = seen[0]
            engine.answer_now()

        presser = threading.Thread(target=press)
        presser.start()
        record = None
        for event in engine.send("Tell me about the sea, the tides and the moon."):
            if isinstance(event, ThoughtDelta):
                seen[0] = event.live.decode_tokens
                if seen[0] >= 2 + run:
                    pressed.set()
            record = getattr(event, "record", record)
        pressed.set()
        presser.join()
        engine.close()
        if record is None or record.extra.get("thinking_closed_by") != "answer now" or at[0] is None:
            continue  # the thought ended by itself first
        extra.append(record.extra["thought_tokens_sampled"] - at[0])
    return extra


def stop_and_answer_in_tui(path: Path, args) -> list[int]:
    """Thought tokens sampled after Ctrl+G reached the TUI, one figure a run (the key is sent 0.2 s
    to 1 s after the thought shows, later each run)."""
    from terminal import Terminal, fresh_home
    from tui_vs_llama_cli import last_record

    extra = []
    for run in range(args.runs):
        with tempfile.TemporaryDirectory() as folder:
            home = Path(folder)
            env = fresh_home(home, path, f"threads = {args.threads}\ntemperature = 0.0\nmax_tokens = 300\n")
            term = Terminal(f"thinking-{run}", [str(Path(sys.executable).with_name("chatapp")), "--ctx", "2048",
                                                "--session", "stop"], env, height=60)
            try:
                term.wait_for("KV cache", 120)
                term.type("Tell me about the sea.")
                term.wait_for("Tell me about the sea.", 10)  # typed in before Enter, not read as one burst
                time.sleep(0.3)
                term.keys("Enter")
                term.wait_for("Thinking…", 120)
                time.sleep(0.2 + 0.8 * run / max(1, args.runs - 1))
                term.keys("C-g")
                term.wait_for("this turn wrote", 120)
                term.keys("C-q")
                term.wait_exit(60)
            finally:
                term.close()
            record = last_record(home, 0)
            if record is not None and record.get("thinking_closed_by") == "answer now":
                extra.append(record["answer_now_extra_tokens"])
    return extra


def think_more(path: Path, args) -> list[tuple[int, str]]:
    """(prefill tokens, from) of a think-more turn, with a budget's close and with the model's own."""
    out = []
    for budget in (6, 12, -1):
        engine = open_engine(path, args, think_budget=budget)
        list(engine.send(QUESTIONS[0]))
        record = list(engine.think_more(16))[-1].record
        out.append((record.prefill_tokens, str(record.extra.get("think_more_from"))))
        engine.close()
    return out


def budget_overrun(path: Path, args) -> list[tuple[int, int, int, int]]:
    """(budget, sampled past it, thought tokens past it, the forced close's tokens) per budget."""
    out = []
    for budget in (0, 1, 4, 16, 32):
        engine = open_engine(path, args, think_budget=budget, max_tokens=96)
        record = list(engine.send("Why is the sky blue?"))[-1].record
        if record.extra.get("thinking_closed_by") == "budget":
            out.append((budget, record.extra["thought_tokens_sampled"] - budget, record.thinking_tokens - budget,
                        int(record.extra.get("thinking_forced_tokens", 0))))
        engine.close()
    return out


def history(path: Path, args, choice: str) -> list[tuple[int, int, int, int]]:
    """(predicted, measured, prefill tokens, prompt tokens) for each of 5 turns."""
    engine = open_engine(path, args, think_budget=8, thinking_history=choice)
    rows = []
    for question in QUESTIONS:
        predicted = engine.reprefill_expected()
        record = list(engine.send(question))[-1].record
        rows.append((predicted, int(record.extra.get("reprefill_tokens", 0)), record.prefill_tokens,
                     record.prompt_tokens))
    engine.close()
    return rows


def parser_cost(path: Path, args) -> tuple[list[float], list[float]]:
    """On/off decode speed of the same greedy reply, pairs in alternating order: "on" runs the
    backend with a Steering (no budget: nothing forced, the same tokens) and splits its text
    with TurnSplit as the engine does; "off" runs neither. Two ratios a pair: of decode tokens per
    second of llama.cpp's decode time, and per CPU second of the whole turn (less swayed by other
    work on a shared machine)."""
    settings = Settings(n_ctx=2048, threads=args.threads, system_prompt=SYSTEM)
    backend = LocalBackend.load(path, settings)  # its decode loop is what is measured
    engine = Engine(backend, settings)
    fmt = engine.thinking.format
    prompt = engine.prompt_ids([Message("system", SYSTEM), Message("user", "Tell me a long story about the sea.")])
    generation = GenerationSettings(temperature=0.0, max_tokens=args.tokens)

    def run(on: bool) -> tuple[float, float, str]:
        steer = Steering(fmt, engine.thinking.continued_ids(fmt.forced_close)) if on else None
        split = TurnSplit(fmt if on else None)
        done, cpu = None, time.process_time()
        for event in backend.stream(prompt, generation, threading.Event(), steer=steer):
            if isinstance(event, TextDelta):
                list(split.feed(event))
            elif isinstance(event, Generated):
                done = event
        cpu = time.process_time() - cpu  # every thread of the process: what the turn cost the machine
        return done.decode_tokens / done.decode_ms * 1000, done.decode_tokens / cpu, done.reply

    run(True)  # warm
    ratios, cpu_ratios, replies = [], [], set()
    for i in range(args.runs):
        order = (True, False) if i % 2 == 0 else (False, True)
        speeds, cpu_speeds = {}, {}
        for on in order:
            speeds[on], cpu_speeds[on], reply = run(on)
            replies.add(reply)
        ratios.append(speeds[True] / speeds[False])
        cpu_ratios.append(cpu_speeds[True] / cpu_speeds[False])
    engine.close()
    assert len(replies) == 1, "the parser changed the reply"
    return ratios, cpu_ratios


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=9)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--tokens", type=int, default=160, help="reply tokens of each parser-cost decode")
    parser.add_argument("--parts", default="stop,tui,more,budget,history,parser",
                        help="which measurements to run, comma-separated (all by default)")
    args = parser.parse_args()
    parts = set(args.parts.split(","))
    source = resolve_model(None, Settings())
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "r1-shaped.gguf"
        copies_with_templates(source, {path: R1_SHAPED})
        if "stop" in parts:
            extra = stop_and_answer(path, args)
            print(f"stop and answer: thought tokens sampled after answer_now, {len(extra)} runs: {extra}; "
                  f"max {max(extra) if extra else '-'} (target <= 1)")
        if "tui" in parts:
            extra = stop_and_answer_in_tui(path, args)
            print(f"stop and answer in the TUI (Ctrl+G in tmux): thought tokens sampled after the key, "
                  f"{len(extra)} runs: {extra}; max {max(extra) if extra else '-'} (target <= 1)")
        if "more" in parts:
            more = think_more(path, args)
            print("think more: prefill tokens (budget 6, budget 12, the model's own end): "
                  + ", ".join(f"{n} (from {src})" for n, src in more) + " (target 0)")
        for budget, sampled, past, forced in budget_overrun(path, args) if "budget" in parts else ():
            print(f"budget {budget}: sampled past it {sampled} (target 0); thought tokens past it {past}, "
                  f"the forced close {forced} tokens (target <= {forced})")
        for choice in ("template", "keep") if "history" in parts else ():
            rows = history(path, args, choice)
            worst = max(abs(p - m) for p, m, _, _ in rows)
            cells = "; ".join(f"turn {i + 1}: {p} predicted, {m} measured, prefill {pf} of {pt}"
                              for i, (p, m, pf, pt) in enumerate(rows))
            print(f"history {choice}: {cells}; worst |predicted - measured| {worst} (target <= 1)")
        if "parser" in parts:
            ratios, cpu_ratios = parser_cost(path, args)
            print(f"parser on/off decode speed, {len(ratios)} pairs: median {statistics.median(ratios):.3f} "
                  f"(range {min(ratios):.3f}-{max(ratios):.3f}; target >= 0.98); per CPU second (the turn's, "
                  f"all threads): median {statistics.median(cpu_ratios):.3f} "
                  f"(range {min(cpu_ratios):.3f}-{max(cpu_ratios):.3f})")

if __name__ == "__main__":
    main()
