"""Inside the next token: how exact the views are and what they cost (issue 39's targets).

1. Lens: a greedy reply of --reply-tokens tokens; at each reply token the lens's last layer
   against llama.cpp's logits (largest probability difference over the vocabulary; target 1e-3),
   and the time of one lens with the output head already dequantized (target <= 1 s).
2. Sampler chain: --seeds seeded replies drawn by llama.cpp's own chain, each replayed stage by
   stage with the same seed: how many replay every token (target: all).
3. Perplexity: chatapp's estimate and llama-perplexity's on the same text and --ctx (target:
   within 1%), and both speeds in tokens a second (target: chatapp >= 0.9x).

    .venv/bin/python benchmarks/next_token.py [--model PATH] [--text FILE] [--ctx 512] [--seeds 20]

Timings on a shared 2-core machine vary with the load; the exactness figures do not.
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def main() -> None:
    from chatapp.config import Settings
    from chatapp.engine.local.next_token import NextTokenViews
    from chatapp.engine.models.catalog import load_catalog
    from chatapp.engine.models.resolve import resolve_model
    from chatapp.llama_tools import ensure_tools

    parser = argparse.ArgumentParser()
    parser.add_argument("--model", type=Path)
    parser.add_argument("--text", type=Path, default=ROOT / "docs" / "inference.md")
    parser.add_argument("--ctx", type=int, default=512)
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--reply-tokens", type=int, default=64)
    args = parser.parse_args()
    model = args.model or resolve_model(load_catalog().default)
    views = NextTokenViews.load(model, Settings(), n_ctx=2048)
    rt = views.runtime
    prompt = rt.tokenize(rt.render_chat([{"role": "user", "content": "Explain how a bicycle works."}],
                                        add_generation_prompt=True), special=True, add_bos=rt.adds_bos)

    reply = views.generate(prompt, temperature=0, top_k=40, top_p=0.95, min_p=0.05, seed=0,
                           max_tokens=args.reply_tokens)
    tokens = prompt + reply
    views.output_head()
    gaps, seconds = [], []
    for position in range(len(prompt) - 1, len(tokens) - 1):
        started = time.perf_counter()
        found = views.lens(tokens, position, tokens[position + 1])
        seconds.append(time.perf_counter() - started)
        gaps.append(found.last_layer_gap)
    print(f"lens: {len(gaps)} reply tokens, last-layer gap max {max(gaps):.2e} (median {statistics.median(gaps):.2e}); "
          f"one lens {statistics.median(seconds):.2f} s median, {min(seconds):.2f} s best")

    same = 0
    for seed in range(args.seeds):
        chain = dict(temperature=0.8, top_k=40, top_p=0.95, min_p=0.05, seed=seed)
        drawn = views.generate(prompt, max_tokens=24, **chain)
        replayed = views.replay_chain(prompt, drawn, **chain)
        same += replayed.matches[0] == len(drawn)
    print(f"sampler chain: {same} of {args.seeds} seeded replies replayed token for token")

    text = args.text.read_text()
    ids = views.text_ids(text)
    found = views.surprise(ids, args.ctx)
    ours_tps = len(ids) / found.seconds
    tool = ensure_tools() / "llama-perplexity"
    started = time.perf_counter()
    run = subprocess.run([str(tool), "-m", str(model), "-f", str(args.text), "-c", str(args.ctx), "-b", str(args.ctx),
                          "-t", str(rt.threads[1]), "-ngl", "0"], capture_output=True, text=True, check=True)
    theirs_seconds = time.perf_counter() - started
    theirs = float(re.search(r"Final estimate: PPL = ([0-9.]+)", run.stdout + run.stderr).group(1))
    print(f"perplexity: {len(ids):,} tokens, ctx {args.ctx}: chatapp {found.llama_ppl:.4f} "
          f"(all tokens {found.ppl:.4f}), "
          f"llama-perplexity {theirs:.4f}, difference {abs(found.llama_ppl / theirs - 1):.2e} relative; "
          f"chatapp {ours_tps:.0f} tok/s, llama-perplexity {len(ids) / theirs_seconds:.0f} tok/s "
          f"(its whole run, loading included)")
    views.close()


if __name__ == "__main__":
    main()
