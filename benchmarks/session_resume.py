"""Resuming a saved session with its KV state vs re-prefilling its transcript.

For each history size, a synthetic transcript is loaded and prefilled (nothing is generated),
saved as a session, then the next turn is timed two ways from the same starting point (an
empty cache, the model loaded): resume (read the transcript, check and restore the state)
then answer, versus load the transcript and answer, prefilling all of it. TTFT is from the
start of that work to the first streamed text; each figure is the best of its runs, which
damps other load on a shared machine. Also reported: save time and state bytes/token.

    .venv/bin/python benchmarks/session_resume.py [--model PATH] [--sizes 512,2000,4000] [--runs 3]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from chatapp.config import Settings
from chatapp.engine.chat.engine import Engine
from chatapp.engine.events import Message, TextDelta
from chatapp.engine.local.backend import LocalBackend
from chatapp.engine.models.resolve import resolve_model
from chatapp.engine.sessions import SessionManager
from chatapp.engine.sessions.manager import LiveSession

NEW_TURN = "Summarise what we discussed in one sentence."
TOPICS = ("lighthouses", "tidal pools", "bread baking", "comet orbits", "glacier flow", "violin making",
          "bee colonies", "river deltas", "paper folding", "desert rain")


def history(engine: Engine, target: int) -> list[Message]:
    """User/assistant pairs until the templated prompt holds about `target` tokens."""
    messages = [Message("system", engine.settings.system_prompt)]
    i = 0
    while True:
        topic = TOPICS[i % len(TOPICS)]
        user = Message("user", f"Question {i}: tell me one fact about {topic}, and why it matters.")
        reply = Message("assistant", f"Fact {i} about {topic}: it is shaped by slow, patient forces over long "
                                     f"stretches of time, which is why people who study {topic} learn to wait.")
        if len(engine.prompt_ids(messages + [user, reply])) > target:
            return messages
        messages += [user, reply]
        i += 1


def ttft(engine: Engine, start: float) -> tuple[float, str]:
    first, parts = None, []
    for event in engine.send(NEW_TURN):
        if isinstance(event, TextDelta):
            first = first or time.perf_counter()
            parts.append(event.text)
    return (first - start) * 1000, "".join(parts)


def measure(engine: Engine, backend: LocalBackend, manager: SessionManager, size: int, runs: int) -> dict:
    messages = history(engine, size)
    engine.load_conversation(messages)
    engine.clear_cache()
    backend.runtime.eval(engine.prompt_ids())  # the transcript into the cache, nothing generated
    name = f"bench-{size}"
    live = LiveSession(manager, name, engine)
    saves = [live.save_now(force=True) for _ in range(runs)]
    saved = saves[-1]

    resumes, restore_ms = [], []
    for _ in range(runs):
        engine.clear_cache()
        start = time.perf_counter()
        resumed = manager.resume(name, engine)
        assert resumed.report.restored, resumed.report.fallback
        ms, resume_reply = ttft(engine, start)
        resumes.append(ms)
        restore_ms.append(resumed.report.restore_ms)

    reprefills = []
    for _ in range(max(1, runs // 2)):  # the slow path: fewer runs
        engine.clear_cache()
        engine.load_conversation(messages)
        ms, reprefill_reply = ttft(engine, time.perf_counter())
        reprefills.append(ms)
    return {
        "tokens": saved.state_tokens,
        "state_mib": saved.state_bytes / 2**20,
        "bytes_per_token": saved.state_bytes / saved.state_tokens,
        "save_ms": min(s.save_ms for s in saves),
        "restore_ms": min(restore_ms),
        "resume_ttft": min(resumes),
        "reprefill_ttft": min(reprefills),
        "same_reply": resume_reply == reprefill_reply,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None)
    parser.add_argument("--ctx", type=int, default=8192)
    parser.add_argument("--sizes", default="512,2000,4000")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()

    settings = Settings(n_ctx=args.ctx, temperature=0.0, max_tokens=4)
    backend = LocalBackend.load(resolve_model(args.model, settings), settings)
    engine = Engine(backend, settings)
    s = engine.summary
    print(f"{s.name} {s.quant} · {s.backend} · {s.threads} threads · n_ctx {s.n_ctx} · KV {s.kv_type}")
    header = (f"{'history':>8} {'state':>9} {'B/token':>8} {'save':>8} {'restore':>8} {'resume TTFT':>12} "
              f"{'re-prefill TTFT':>16} {'resume/re-prefill':>18}  same reply")
    print(header)
    print("-" * len(header))
    with tempfile.TemporaryDirectory(prefix="chatapp-bench-") as tmp:
        manager = SessionManager.open(settings, Path(tmp))
        try:
            for size in (int(x) for x in args.sizes.split(",")):
                r = measure(engine, backend, manager, size, args.runs)
                ratio = r["resume_ttft"] / r["reprefill_ttft"]
                print(f"{r['tokens']:>8,} {r['state_mib']:>5.1f} MiB {r['bytes_per_token']:>8,.0f} "
                      f"{r['save_ms']:>5.0f} ms {r['restore_ms']:>5.0f} ms {r['resume_ttft']:>9,.0f} ms "
                      f"{r['reprefill_ttft']:>13,.0f} ms {ratio:>17.1%}  {'yes' if r['same_reply'] else 'no'}",
                      flush=True)
        finally:
            engine.close()
    print("target: at ~2,000 tokens, resume TTFT <= 5% of re-prefill TTFT")


if __name__ == "__main__":
    main()
