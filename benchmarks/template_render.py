"""What the chat template's time limit costs: one render with and without the trace guard.

The default model's own template (read from its GGUF) renders a conversation of --messages
messages; each figure is the best of --runs batches of --renders renders, which damps other
load on a shared machine. chatapp renders the template several times per turn (the prompt,
its prefix for the Tokens panel, the composer's preview), so the per-render cost is what counts.

    .venv/bin/python benchmarks/template_render.py [--model PATH] [--messages 10] [--renders 2000] [--runs 5]
"""

from __future__ import annotations

import argparse
import time

from chatapp.engine.models import template
from chatapp.engine.models.gguf_header import read_header
from chatapp.engine.models.resolve import resolve_model


def best_per_render(render, renders: int, runs: int) -> float:
    best = float("inf")
    for _ in range(runs):
        started = time.perf_counter()
        for _ in range(renders):
            render()
        best = min(best, (time.perf_counter() - started) / renders)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model")
    parser.add_argument("--messages", type=int, default=10)
    parser.add_argument("--renders", type=int, default=2000)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    path = resolve_model(args.model)
    source = read_header(path, check_data=False).metadata[template.TEMPLATE_KEY]
    chat = template.ChatTemplate(source, bos_token="<s>", eos_token="</s>")
    messages = [{"role": "system", "content": "You are a helpful assistant."}]
    for i in range(args.messages - 1):
        messages.append({"role": "user" if i % 2 == 0 else "assistant",
                         "content": f"Message {i}: a sentence or two of ordinary chat, about this long."})
    context = dict(messages=messages, bos_token="<s>", eos_token="</s>", add_generation_prompt=True)
    bare = best_per_render(lambda: chat._template.render(**context), args.renders, args.runs)
    guarded = best_per_render(lambda: chat.render(messages, add_generation_prompt=True), args.renders, args.runs)
    print(f"{path.name}: {args.messages} messages, best of {args.runs} x {args.renders} renders")
    print(f"  without the guard  {bare * 1e6:8.1f} us/render")
    print(f"  with the guard     {guarded * 1e6:8.1f} us/render  (+{(guarded - bare) * 1e6:.1f} us, "
          f"{guarded / bare - 1:+.0%})")


if __name__ == "__main__":
    main()
