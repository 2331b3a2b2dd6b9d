"""Inside the next token: how exact the views are and what they cost (issue 39's targets).

1. Lens: a greedy reply of --reply-tokens tokens; at each reply token the lens's last layer
   against llama.cpp's logits (largest probability difference over the vocabulary; target 1e-3),
   and the time of one lens with the output head already dequantized (target <= 1 s).
2. Sampler chain: --seeds seeded replies drawn by llama.cpp's own chain, each replayed stage by
   stage with the same seed: how many replay every token (target: all); and the last stage of
   one replay against a llama-server's post_sampling_probs for the same tokens and settings
   (largest difference; target 1e-3).
3. Perplexity: chatapp's estimate and llama-perplexity's on the same text and --ctx (target:
   within 1%), and both speeds in tokens a second (target: chatapp >= 0.9x): chatapp's default,
   every token's surprise (the output head at every position), and `--estimate`, only the tokens
   llama-perplexity scores (the output head at the second halves, as it computes), like for like.
4. What a second quant costs: mean KL divergence and the same-top share against
   llama-perplexity --kl-divergence on the same pair (a Q3_K_S made by llama-quantize in a temp
   folder unless --second is given; target: within 1% relative).

    .venv/bin/python benchmarks/next_token.py [--model PATH] [--text FILE] [--ctx 512] [--seeds 100]
        [--parts lens,chain,perplexity,kld]

Timings on a shared 2-core machine vary with the load; the exactness figures do not.
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def main() -> None:
    from chatapp.config import Settings
    from chatapp.engine.local.next_token import NextTokenViews
    from chatapp.engine.models.catalog import load_catalog
    from chatapp.engine.models.resolve import resolve_model

    parser = argparse.ArgumentParser()
    parser.add_argument("--model", type=Path)
    parser.add_argument("--text", type=Path, help="default: the docs' pages, cut at 4,096 tokens")
    parser.add_argument("--pairs", type=int, default=5, help="alternating perplexity runs on each side")
    parser.add_argument("--ctx", type=int, default=512)
    parser.add_argument("--seeds", type=int, default=100)
    parser.add_argument("--second", type=Path, help="a second quant of the model (default: a Q3_K_S made here)")
    parser.add_argument("--reply-tokens", type=int, default=64)
    parser.add_argument("--parts", default="lens,chain,perplexity,kld", help="which of the four to run")
    args = parser.parse_args()
    parts = set(args.parts.split(","))
    model = args.model or resolve_model(load_catalog().default)
    views = NextTokenViews.load(model, Settings(), n_ctx=2048)
    rt = views.runtime
    prompt = rt.tokenize(rt.render_chat([{"role": "user", "content": "Explain how a bicycle works."}],
                                        add_generation_prompt=True), special=True, add_bos=rt.adds_bos)

    if "lens" in parts:
        lens_part(views, prompt, args.reply_tokens)
    if "chain" in parts:
        chain_part(views, prompt, model, args.seeds)
    text = args.text.read_text() if args.text else four_thousand_tokens(views)
    source = Path(tempfile.mkstemp(suffix=".txt")[1])
    source.write_text(text)
    ids = views.text_ids(text)
    if "perplexity" in parts:
        perplexity_part(views, ids, source, model, args.ctx, args.pairs)
    if "kld" in parts:
        kld_part(views, ids, source, model, args.ctx, args.second)
    source.unlink()
    views.close()


def lens_part(views, prompt: list[int], reply_tokens: int) -> None:
    reply = views.generate(prompt, temperature=0, top_k=40, top_p=0.95, min_p=0.05, seed=0, max_tokens=reply_tokens)
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


def chain_part(views, prompt: list[int], model: Path, seeds: int) -> None:
    same = 0
    for seed in range(seeds):
        chain = dict(temperature=0.8, top_k=40, top_p=0.95, min_p=0.05, seed=seed)
        drawn = views.generate(prompt, max_tokens=24, **chain)
        replayed = views.replay_chain(prompt, drawn, **chain)
        same += replayed.matches[0] == len(drawn)
    print(f"sampler chain: {same} of {seeds} seeded replies replayed token for token")
    print(f"sampler chain against llama-server post_sampling_probs: largest difference "
          f"{against_server(model, views, prompt):.2e} over a 24-token reply's top 10s")


def perplexity_part(views, ids: list[int], source: Path, model: Path, ctx: int, pairs: int) -> None:
    from chatapp.llama_tools import ensure_tools

    tool = ensure_tools() / "llama-perplexity"
    every, scored, theirs = [], [], []
    for _ in range(pairs):  # alternating, each side's compute only (llama-perplexity's own clock)
        found = views.surprise(ids, ctx)
        every.append(len(ids) / found.seconds)
        estimate = views.surprise(ids, ctx, only_scored=True)
        scored.append(len(ids) // ctx * ctx / estimate.seconds)  # the full windows, as llama-perplexity's
        run = subprocess.run([str(tool), "-m", str(model), "-f", str(source), "-c", str(ctx), "-b", str(ctx),
                              "-t", str(views.runtime.threads[1]), "-ngl", "0", "-fa", "off"], capture_output=True,
                             text=True, check=True)
        printed = run.stdout + run.stderr
        begun = stamp(re.search(r"(\d+\.\d+\.\d+\.\d+) I perplexity: calculating", printed).group(1))
        ended = stamp(re.search(r"(\d+\.\d+\.\d+\.\d+) I Final estimate", printed).group(1))
        theirs.append((len(ids) // ctx) * ctx / (ended - begun))  # the full windows it evaluates
    llama_ppl = float(re.search(r"Final estimate: PPL = ([0-9.]+)", printed).group(1))

    def ratios(ours: list[float]) -> str:
        found = [a / b for a, b in zip(ours, theirs)]
        return (f"{statistics.median(ours):.0f} tok/s, ratio median {statistics.median(found):.3f} "
                f"({min(found):.3f}-{max(found):.3f})")

    print(f"perplexity: {len(ids):,} tokens, ctx {ctx}: chatapp {found.llama_ppl:.4f} (all tokens {found.ppl:.4f}; "
          f"--estimate {estimate.ppl:.4f}), llama-perplexity {llama_ppl:.4f}, difference "
          f"{abs(found.llama_ppl / llama_ppl - 1):.2e} relative; speed over {pairs} alternating triples, flash "
          f"attention off: llama-perplexity {statistics.median(theirs):.0f} tok/s (its compute, loading excluded); "
          f"chatapp --estimate (the same logits: second halves) {ratios(scored)}; chatapp every token's surprise "
          f"(logits at every position) {ratios(every)}")


def kld_part(views, ids: list[int], source: Path, model: Path, ctx: int, second: Path | None) -> None:
    from chatapp.config import Settings
    from chatapp.engine.local.next_token import NextTokenViews
    from chatapp.llama_tools import ensure_tools

    tool = ensure_tools() / "llama-perplexity"
    with tempfile.TemporaryDirectory() as folder:
        second = second or quantized(model, Path(folder))
        other = NextTokenViews.load(second, Settings())
        cost = views.compare(ids, ctx, other)
        other.close()
        base = Path(folder) / "base.kld"
        common = ["-f", str(source), "-c", str(ctx), "-b", str(ctx), "-t", str(views.runtime.threads[1]), "-ngl",
                  "0", "-fa", "off", "--kl-divergence-base", str(base)]
        subprocess.run([str(tool), "-m", str(model), *common], capture_output=True, check=True)
        run = subprocess.run([str(tool), "-m", str(second), *common, "--kl-divergence"], capture_output=True,
                             text=True, check=True)
    printed = run.stdout + run.stderr
    their_kld = float(re.search(r"Mean\s+KLD:\s+([0-9.]+)", printed).group(1))
    their_same = float(re.search(r"Same top p:\s+([0-9.]+)", printed).group(1)) / 100
    kld, same_top = cost.llama_figures()
    print(f"second quant {second.name}: mean KLD chatapp {kld:.5f}, llama-perplexity {their_kld:.5f} "
          f"({abs(kld / their_kld - 1):.2%} apart); same top chatapp {same_top:.4f}, llama-perplexity "
          f"{their_same:.4f} ({abs(same_top / their_same - 1):.2%} apart); over every token chatapp's "
          f"mean KLD is {cost.kld_mean:.5f}, same top {cost.same_top_share:.4f}")
    for line in cost.describe():
        print(line)


def four_thousand_tokens(views) -> str:
    text = "\n\n".join(page.read_text() for page in sorted((ROOT / "docs").glob("*.md")))
    return "".join(views.pieces(views.text_ids(text)[:4096]))


def stamp(text: str) -> float:
    """Seconds from a llama.cpp log timestamp (minutes.seconds.milliseconds.microseconds)."""
    minutes, seconds, millis, micros = text.split(".")
    return int(minutes) * 60 + int(seconds) + int(millis) / 1e3 + int(micros) / 1e6


def quantized(model: Path, folder: Path) -> Path:
    from chatapp.llama_tools import ensure_tools

    target = folder / "second-Q3_K_S.gguf"
    subprocess.run([str(ensure_tools() / "llama-quantize"), "--allow-requantize", str(model), str(target), "Q3_K_S",
                    "2"], capture_output=True, check=True)
    return target


def against_server(model: Path, views, prompt: list[int]) -> float:
    """A seeded reply replayed stage by stage, its last stage against a llama-server's
    post_sampling_probs after the same tokens (flash attention off on both, as chatapp's views)."""
    import httpx

    from chatapp.engine.backend import GenerationSettings
    from chatapp.engine.server.backend import sampling
    from llama_server import llama_server

    generation = GenerationSettings(temperature=0.8, top_k=40, top_p=0.95, min_p=0.05, seed=3, max_tokens=24)
    chain = dict(temperature=0.8, top_k=40, top_p=0.95, min_p=0.05, seed=3)
    reply = views.generate(prompt, max_tokens=24, **chain)
    replay = views.replay_chain(prompt, reply, **chain)
    with llama_server(model, "-np", "1", "-c", "2048", "-fa", "off", "-t", str(views.runtime.threads[0])) as url:
        worst = 0.0
        for i, step in enumerate(replay.steps):
            body = {"prompt": prompt + reply[:i], "n_predict": 1, "cache_prompt": True, **sampling(generation),
                    "n_probs": 10, "post_sampling_probs": True}
            (entry,) = httpx.post(f"{url}/completion", json=body, timeout=60).json()["completion_probabilities"]
            mine = {c.id: c.p for c in step.stages[-1].top}
            worst = max([worst] + [abs(c["prob"] - mine.get(c["id"], 0.0)) for c in entry["top_probs"]])
        return worst


if __name__ == "__main__":
    main()
