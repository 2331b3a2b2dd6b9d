"""Every chat template llama.cpp ships, on the default model (issue 53): the history cost chatapp
predicts and measures, the tokens it reuses against llama-server's prompt cache on the same
conversation, and whether its prompt is the one llama-server renders.

For each template in the vendored source (chatapp.llama_tools.templates_dir), on a copy of the
default model carrying it (tests/gguf_copy.py), three questions, greedy, 6 reply tokens:

- in process (chatapp's Engine): before turns 2 and 3, the re-prefill the KV panel predicts
  (BranchFigures.reprefill), then what the turn re-prefilled (the record's reprefill_tokens) and
  the tokens it reused from the cache (cached_tokens);
- llama-server on the same copy (--jinja, one slot, the same context, threads and flash-attention
  setting), the same questions through its own /v1/chat/completions, each reply sent back as its
  `content` (as its WebUI does): the tokens its prompt cache reused (timings.cache_n);
- whether chatapp's first prompt equals the server's /apply-template of the same messages.

A turn's reuse is compared where both sides had the same history before it (the same replies
to the questions before): greedy replies can part after a turn because the two sides split the
prompt into other batches (other rounding), and a different history is another conversation.

    .venv/bin/python benchmarks/template_families.py [--only NAME ...] [--threads 2]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from llama_server import llama_server

from chatapp.config import Settings
from chatapp.engine.backend import GenerationSettings
from chatapp.engine.chat.engine import Engine
from chatapp.engine.events import Message
from chatapp.engine.local.backend import LocalBackend
from chatapp.engine.local.llama import LlamaRuntime, LoadOptions
from chatapp.engine.models.resolve import resolve_model
from chatapp.errors import ChatappError
from chatapp.llama_tools import templates_dir

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the template copies are made as the tests make them
from tests.gguf_copy import copies_with_templates

QUESTIONS = ("What is the capital of France?", "And of Italy?", "Thanks.")
SYSTEM = "You are a concise assistant."
N_CTX = 2048  # GigaChat's template alone is over 1000 tokens
MAX_TOKENS = 6


@dataclass
class Family:
    name: str
    predicted: list[int] = field(default_factory=list)
    """Turns 2 and 3: the re-prefill predicted before the turn."""
    reprefilled: list[int] = field(default_factory=list)
    ours: list[int] = field(default_factory=list)
    """Turns 1 to 3: tokens chatapp reused from its cache."""
    replies: list[str] = field(default_factory=list)
    theirs: list[int] = field(default_factory=list)
    """Turns 1 to 3: llama-server's cache_n."""
    their_replies: list[str] = field(default_factory=list)
    same_render: bool | None = None
    problem: str = ""
    """Why chatapp's turns did not run."""
    server_problem: str = ""
    """Why llama-server's did not (its own refusal, in its words)."""

    @property
    def predicted_within_one(self) -> bool:
        return all(abs(p - m) <= 1 for p, m in zip(self.predicted, self.reprefilled))

    def comparable(self) -> list[int]:
        """Turns 2 and 3 (as 1, 2) whose history was the same on both sides."""
        return [k for k in (1, 2) if len(self.theirs) > k and self.replies[:k] == self.their_replies[:k]]


def in_process(model: Path, threads: int, family: Family) -> str:
    """The three turns in chatapp's Engine; the first turn's prompt as text."""
    runtime = LlamaRuntime(model, LoadOptions(n_ctx=N_CTX, n_threads=threads, n_threads_batch=threads,
                                              flash_attn=False))
    engine = Engine(LocalBackend(runtime), Settings(n_ctx=N_CTX, system_prompt=SYSTEM))
    engine.generation = GenerationSettings(temperature=0.0, max_tokens=MAX_TOKENS)
    try:
        first_prompt = engine.render([Message("system", SYSTEM), Message("user", QUESTIONS[0])])
        for turn, question in enumerate(QUESTIONS):
            figures = engine.branch_figures()
            record = list(engine.send(question))[-1].record
            family.ours.append(record.cached_tokens)
            family.replies.append(record.reply)
            if turn:
                family.predicted.append(figures.reprefill)
                family.reprefilled.append(record.extra.get("reprefill_tokens", 0))
        return first_prompt
    finally:
        engine.close()


def post(url: str, body: dict) -> dict:
    request = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            return json.load(response)
    except urllib.error.HTTPError as exc:  # the server's own words for what it refused
        raise ValueError(f"llama-server answered {exc.code}: {exc.read(300).decode(errors='replace')}") from None


def on_llama_server(model: Path, threads: int, first_prompt: str, family: Family) -> None:
    args = ("--jinja", "-np", "1", "-c", str(N_CTX), "-t", str(threads), "-fa", "off")  # as in process: off on a CPU
    with llama_server(model, *args) as url:
        rendered = post(f"{url}/apply-template", {"messages": [{"role": "system", "content": SYSTEM},
                                                               {"role": "user", "content": QUESTIONS[0]}]})
        family.same_render = rendered["prompt"] == first_prompt
        messages = [{"role": "system", "content": SYSTEM}]
        for question in QUESTIONS:
            messages.append({"role": "user", "content": question})
            answer = post(f"{url}/v1/chat/completions", {
                "messages": messages, "max_tokens": MAX_TOKENS, "temperature": 0.0, "cache_prompt": True,
                "samplers": ["temperature"], "seed": 0})
            family.theirs.append(answer["timings"]["cache_n"])
            content = answer["choices"][0]["message"].get("content") or ""
            family.their_replies.append(content)
            messages.append({"role": "assistant", "content": content})


def measure(template: Path, source: Path, folder: Path, threads: int) -> Family:
    family = Family(template.stem)
    model = folder / f"{template.stem}.gguf"
    copies_with_templates(source, {model: template.read_text(encoding="utf-8")})
    try:  # each side's failure is a row that says so, not the run's end
        try:
            first_prompt = in_process(model, threads, family)
        except (ChatappError, OSError, ValueError) as exc:
            family.problem = f"{type(exc).__name__}: {exc}"[:300]
            return family
        try:
            on_llama_server(model, threads, first_prompt, family)
        except (OSError, KeyError, ValueError) as exc:
            family.server_problem = str(exc)[:300]
    finally:
        model.unlink(missing_ok=True)
    return family


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", help="template names (file stems) to run; default: all")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    templates = sorted(templates_dir().glob("*.jinja"))
    if args.only:
        templates = [t for t in templates if t.stem in set(args.only)]
    source = resolve_model(None)
    started, rows = time.monotonic(), []
    print(f"{'template':44} {'predicted/measured t2,t3':>24} {'reused ours/server t1..3':>28} render")
    with tempfile.TemporaryDirectory(prefix="template-families-") as folder:
        for template in templates:
            family = measure(template, source, Path(folder), args.threads)
            rows.append(family)
            if family.problem:
                print(f"{family.name:44} {family.problem}")
                continue
            pm = ", ".join(f"{p}/{m}" for p, m in zip(family.predicted, family.reprefilled))
            if family.server_problem:
                print(f"{family.name:44} {pm:>24} chatapp {', '.join(map(str, family.ours))}; {family.server_problem}")
                continue
            reuse = ", ".join(f"{o}/{t}" for o, t in zip(family.ours, family.theirs))
            same = "" if family.comparable() == [1, 2] else f" (same history: {len(family.comparable())} of 2)"
            print(f"{family.name:44} {pm:>24} {reuse + same:>28} {'equal' if family.same_render else 'differs'}",
                  flush=True)
    ran = [f for f in rows if not f.problem]
    turns = [(f, k) for f in ran for k in f.comparable()]
    fewer = [(f, k) for f, k in turns if f.ours[k] < f.theirs[k]]
    print(f"\n{len(rows)} templates in {time.monotonic() - started:.0f} s; chatapp's turns failed on "
          f"{len(rows) - len(ran)}, llama-server's on {sum(bool(f.server_problem) for f in ran)}")
    print(f"predicted re-prefill = measured ±1 on turns 2 and 3: {sum(f.predicted_within_one for f in ran)}"
          f" of {len(ran)}")
    print(f"turns 2 and 3 with the same history on both sides: {len(turns)} of {2 * len(ran)}; on those, "
          f"chatapp reused at least llama-server's cache_n on {len(turns) - len(fewer)}")
    for f, k in fewer:
        print(f"  fewer: {f.name} turn {k + 1}: {f.ours[k]} < {f.theirs[k]}")
    rendered = [f for f in ran if f.same_render is not None]
    print(f"first prompt equal to llama-server's /apply-template: {sum(bool(f.same_render) for f in rendered)}"
          f" of {len(rendered)}")


if __name__ == "__main__":
    main()
