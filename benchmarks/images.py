"""Images encoded once: turn 2 after an image, and resuming a state that holds one.

No vision model is on this machine, so the projector is the tests' synthetic LLaVA-style `mlp`
clip (random weights), sized here like a small real encoder: 224-pixel images in 14-pixel
patches (256 image tokens), a 384-wide ViT of --layers blocks. Its encode time is therefore
an estimate of a small projector's, not a real model's; the counts (encodes, image tokens,
prefilled tokens) do not depend on the weights.

Reported: libmtmd's image token count and the cells the image fills; encode ms apart from
prefill ms; turn 2's encodes and prefilled tokens against the new text's; a resume (restore
the KV state, run the last token for its logits) against encode + prefill from an empty cache,
each the best of --runs.

    .venv/bin/python benchmarks/images.py [--model PATH] [--layers 4] [--runs 3] [--threads 1]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the projector is built as the tests build it

from chatapp.engine.local.llama import LlamaRuntime, LoadOptions
from chatapp.config import Settings
from chatapp.engine.backend import GenerationSettings
from chatapp.engine.chat.engine import Engine
from chatapp.engine.local.backend import LocalBackend
from chatapp.engine.local.llama.mtmd import Projector
from chatapp.paths import models_dir
from tests.engine.local.vision import build_projector, feed, picture, prompt_ids

USER = "<|im_start|>user\n"
ASK = "What is in this picture?<|im_end|>\n<|im_start|>assistant\n"
TURN2 = "A test pattern.<|im_end|>\n<|im_start|>user\nWhich colour is most common?<|im_end|>\n<|im_start|>assistant\n"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", type=Path, default=None)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    model = args.model or models_dir() / "SmolLM2-135M-Instruct.Q4_1.gguf"
    options = LoadOptions(n_ctx=2048, n_threads=args.threads, n_threads_batch=args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        mmproj = build_projector(Path(tmp) / "mmproj-bench.gguf", width=384, ff=1536, layers=args.layers,
                                 image_size=224, patch_size=14)
        rt = LlamaRuntime(model, options)
        image = picture(1, 300, 400)
        cold = []
        for _ in range(args.runs):  # encode + prefill from an empty cache, a new projector each time
            rt.clear_kv()
            projector = Projector(rt, mmproj, n_threads=args.threads)
            cells = projector.image(image, "bench.png")
            parts = [USER, cells, ASK]
            began = time.perf_counter()
            feed(projector, parts)
            cold.append(((time.perf_counter() - began) * 1000, projector.last_encode_ms))
            projector.close()
        total_ms, encode_ms = min(cold)
        print(f"image: 400x300 px, libmtmd n_tokens {cells.n_tokens} ({cells.nx}x{cells.ny}), "
              f"cells filled {len(cells.ids)}, prompt {len(prompt_ids(rt, parts))} cells")
        print(f"first turn: encode {encode_ms:.1f} ms, prefill + image decode {total_ms - encode_ms:.1f} ms, "
              f"total {total_ms:.1f} ms")

        projector = Projector(rt, mmproj, n_threads=args.threads)
        rt.clear_kv()
        parts = [USER, projector.image(image), ASK]
        feed(projector, parts)
        state, tokens = bytes(rt.seq_state()), rt.kv_tokens
        before = rt.n_cached
        kept = feed(projector, parts + [TURN2])
        new_text = len(rt.tokenize(TURN2, special=True))
        print(f"turn 2: encodes {projector.encodes - 1}, kept {kept} of {before} cells, "
              f"prefilled {rt.n_cached - kept} tokens, new text {new_text} tokens")

        resumes = []
        for _ in range(args.runs):  # a fresh projector: nothing encoded, as after a restart
            rt.clear_kv()
            fresh = Projector(rt, mmproj, n_threads=args.threads)
            began = time.perf_counter()
            rt.restore_seq_state(state, tokens)
            feed(fresh, [USER, fresh.image(image), ASK])
            resumes.append(((time.perf_counter() - began) * 1000, fresh.encodes))
            fresh.close()
        resume_ms, encodes = min(resumes)
        print(f"resume: encodes {encodes}, restore + last token {resume_ms:.1f} ms, "
              f"{resume_ms / total_ms:.3f}x of encode + prefill ({total_ms:.1f} ms)")
        rt.close()
        chat_path(model, mmproj, image, options)


def open_engine(model: Path, mmproj: Path | None, options: LoadOptions) -> Engine:
    engine = Engine(LocalBackend(LlamaRuntime(model, options), projector=mmproj), Settings(n_ctx=options.n_ctx))
    engine.generation = GenerationSettings(temperature=0.0, max_tokens=8)
    return engine


def last(events):
    return list(events)[-1].record


def chat_path(model: Path, mmproj: Path, image: bytes, options: LoadOptions) -> None:
    """The same through the engine, as `chatapp ask --image` and the TUI run it: the records'
    figures for turn 1 and 2, then a new engine (a resume) that restores the first turn's cache."""
    engine = open_engine(model, mmproj, options)
    sha = engine.add_image(image, "bench.png").sha256
    first = last(engine.send("What is in this picture?", images=[sha]))
    state, messages = engine.save_cache("bench"), engine.messages
    second = last(engine.send("Which colour is most common?"))
    engine.close()
    control = open_engine(model, None, options)  # the same two questions without the image
    last(control.send("What is in this picture?"))
    plain = last(control.send("Which colour is most common?"))
    control.close()
    print(f"chat turn 1: image_tokens {first.extra['image_tokens']}, encodes {first.extra['image_encodes']}, "
          f"encode {first.extra['image_encode_ms']:.1f} ms apart from prefill {first.prefill_ms:.1f} ms")
    print(f"chat turn 2: encodes {second.extra['image_encodes']}, prefilled {second.prefill_tokens} tokens "
          f"(without the image: {plain.prefill_tokens})")
    resumed = open_engine(model, mmproj, options)
    began = time.perf_counter()
    resumed.add_image(image, "bench.png")
    resumed.load_conversation(messages)
    resumed.restore_cache(state, len(state.tokens))
    restore_ms = (time.perf_counter() - began) * 1000
    again = last(resumed.send("Which colour is most common?"))
    resumed.close()
    cold = first.extra["image_encode_ms"] + first.prefill_ms
    print(f"chat resume: read + restore {restore_ms:.1f} ms = {restore_ms / cold:.3f}x of encode + prefill "
          f"({cold:.1f} ms); the next turn encodes {again.extra['image_encodes']}, "
          f"same reply as without the resume: {again.reply == second.reply}")


if __name__ == "__main__":
    main()
