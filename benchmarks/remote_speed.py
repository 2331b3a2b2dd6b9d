"""chatapp over --server against the server's own figures, for the same requests.

- decode: the tok/s chatapp sees arrive (decode steps between its first and last streamed
  piece, over the wall time between them) against the server's `timings.predicted_per_second`
  for that request (target >= 0.97);
- first token: chatapp's TTFT (from send() to the first streamed piece, so rendering and
  tokenizing the prompt over HTTP count) minus the server's `timings.prompt_ms` (target <= 30 ms
  on localhost).

Without --server it starts a llama-server (built by chatapp.llama_tools) on the default model
on 127.0.0.1 and stops it afterwards.

    .venv/bin/python benchmarks/remote_speed.py [--server URL] [--runs 10] [--tokens 128]
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import time
from collections.abc import Iterator

from chatapp.config import Settings
from chatapp.engine.chat.engine import Engine
from chatapp.engine.opening import connect_engine
from chatapp.engine.events import TextDelta, TurnDone
from chatapp.engine.machine.hardware import physical_cores
from chatapp.engine.models.resolve import resolve_model
from chatapp.errors import ServerError
from llama_server import llama_server

PROMPT = "Write a long, detailed story about a lighthouse keeper who finds a message in a bottle."


@contextlib.contextmanager
def local_server(ctx: int) -> Iterator[str]:
    """A llama-server on the default model, as the remote tests start it."""
    with llama_server(resolve_model(None), "-np", "1", "-c", str(ctx), "-fa", "on", "-t", str(physical_cores())) as url:
        yield url


def connect(settings: Settings) -> Engine:
    deadline = time.monotonic() + 120
    while True:
        try:
            return connect_engine(settings)
        except ServerError:  # not listening yet
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def run(engine: Engine, tokens: int) -> tuple[float, float, float, int]:
    """(chatapp's decode tok/s, the server's, TTFT minus the server's prompt_ms, decode steps)."""
    engine.clear_cache()
    engine.new_chat()
    engine.set_generation(max_tokens=tokens)
    first = last = None
    for event in engine.send(PROMPT):
        if isinstance(event, TextDelta):
            last = (time.perf_counter(), event.live.decode_tokens)
            first = first or last
        elif isinstance(event, TurnDone):
            record = event.record
    timings = record.extra["server_timings"]
    steps = last[1] - first[1]
    seen = steps / (last[0] - first[0]) if last[0] > first[0] else 0.0
    return seen, timings["predicted_per_second"], record.ttft_ms - timings["prompt_ms"], steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server", default=None, help="a running llama-server (default: start one)")
    parser.add_argument("--api-key", default="")
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--ctx", type=int, default=2048)
    args = parser.parse_args()

    with contextlib.ExitStack() as stack:
        url = args.server or stack.enter_context(local_server(args.ctx))
        settings = Settings(n_ctx=args.ctx, temperature=0.0, max_tokens=args.tokens, server=url, api_key=args.api_key)
        engine = stack.enter_context(contextlib.closing(connect(settings)))
        run(engine, 8)  # warm-up: first requests pay for connections and the server's first graph
        rows = [run(engine, args.tokens) for _ in range(args.runs)]

    ratio = statistics.median(seen / server for seen, server, _, _ in rows if server > 0)
    overhead = statistics.median(r[2] for r in rows)
    print(f"llama-server {url} · {engine.summary.name} · decode {rows[-1][3]} steps · {args.runs} runs (medians)")
    print(f"decode tok/s: chatapp {statistics.median(r[0] for r in rows):.1f}, "
          f"server {statistics.median(r[1] for r in rows):.1f}; chatapp/server {ratio:.1%} (target >= 97%)")
    print(f"TTFT minus the server's prompt_ms: {overhead:.1f} ms (target <= 30 ms on localhost)")


if __name__ == "__main__":
    main()
