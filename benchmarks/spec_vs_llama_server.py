"""chatapp's drafting against llama-server's own n-gram speculation, on the same copy tasks.

Each run is a fresh process: `chatapp ask --json` (drafting ngram, or off) or a new llama-server
started for that one /completion request (ngram-mod and ngram-cache learn across requests,
which would flatter them on repeated prompts). Every side gets the same prompt token ids (the
chat template rendered by chatapp, sent to the server as ids), the default model, a q8_0 KV
cache, flash attention, the same fixed thread count and greedy decoding, so that every run of a
task must give the same reply: each is checked against the first, and a mismatch is printed.

Configurations: chatapp drafting and plain; llama-server plain and with each n-gram
`--spec-type` (ngram-simple, ngram-mod, ngram-cache) at its default sizes, and ngram-simple and
ngram-mod sized to chatapp's draft_max. In this llama.cpp build `--spec-draft-n-max` sizes only
a draft model's drafts (common/speculative.cpp: ngram-simple drafts `--spec-ngram-simple-size-m`
tokens, ngram-mod up to `--spec-ngram-mod-n-max`, ngram-cache a fixed 8), so the sized runs pass
it together with the type's own size flags.

Warm (the default), chatapp runs in this account's home, its drafting verdict made once before
the runs; `--cold` gives every chatapp process a fresh home (XDG folders in a temp dir), as a new
user's first process runs: nothing measured, checked or learned before (issue 36).

Decode speed is tokens over the wall time from the end of the prefill to the last token: the
server's `timings.predicted_per_second` (its t_token_generation), and chatapp's record
`decode_wall_ms` (the decode loop's wall clock, drafting or not). Runs of one task alternate
their order round by round (pairs), and each ratio is a median over rounds of per-round ratios.

    .venv/bin/python benchmarks/spec_vs_llama_server.py [--rounds 3] [--tokens 256] [--tasks copy]
    .venv/bin/python benchmarks/spec_vs_llama_server.py --configs chatapp-ngram,server-ngram-mod
    .venv/bin/python benchmarks/spec_vs_llama_server.py --cold [--rounds 3] [--tasks paragraph]

`--again NAME` runs configuration NAME twice in every round, the second time as `NAME~again`,
and holds that copy to the same figure as chatapp (the best of the *other* server drafters, NAME
among them): an A/A check of how far one drafter reads from itself, and from "the best of
several" picked afterwards, on this machine.
    .venv/bin/python benchmarks/spec_vs_llama_server.py --cold --tasks copy --again server-ngram-mod@48
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from llama_server import llama_server
from speculative import FUNCTION, PARAGRAPH, TASKS as OLD_TASKS  # the two existing copy tasks

PASSAGE = ("Bees communicate the location of food through a behaviour called the waggle dance. A forager "
           "returning to the hive moves in a figure-eight pattern, and the angle of the straight run relative "
           "to vertical tells the other bees the direction of the flowers relative to the sun.\n\n"
           "The duration of the waggle run encodes distance: roughly one second of waggling corresponds to "
           "about one kilometre of flight. Bees that watch the dance then leave the hive and fly in the "
           "indicated direction, correcting for the movement of the sun during the day.\n\n"
           "Karl von Frisch decoded this language in the 1940s and received the Nobel Prize in 1973 for his "
           "work on the sensory physiology and behaviour of bees.")
CONFIG_FILE = """[server]
host = "0.0.0.0"
port = 8080
workers = 4
timeout_seconds = 30

[database]
url = "postgres://app@db.internal:5432/orders"
pool_size = 10
max_overflow = 5
echo = false

[cache]
backend = "redis"
url = "redis://cache.internal:6379/0"
ttl_seconds = 300

[logging]
level = "info"
format = "json"
file = "/var/log/orders/app.log"
"""
LIST = """Team directory:
- Name: Alice Moreau | Role: Backend engineer | Office: Lyon | Since: 2019
- Name: Bruno Keller | Role: Data analyst | Office: Zurich | Since: 2020
- Name: Chen Wei | Role: Frontend engineer | Office: Singapore | Since: 2021
- Name: Dana Oyelaran | Role: Product manager | Office: Lagos | Since: 2018
- Name: Emil Novak | Role: Site reliability engineer | Office: Prague | Since: 2022
"""
COPY = {
    "paragraph": OLD_TASKS["copy"][0],
    "rename": OLD_TASKS["copy"][1],
    "quote": f"Quote the second paragraph of this text back word for word, then stop:\n\n{PASSAGE}",
    "config": ("Change the port to 9090 and the log level to \"debug\" in this config file and show the whole "
               f"file:\n\n{CONFIG_FILE}"),
    "list": (f"{LIST}\nAdd five more people to this directory in exactly the same format, one per line, then "
             "show the whole directory."),
}
CHAT = {f"chat{i + 1}": prompt for i, prompt in enumerate(OLD_TASKS["chat"])}
assert PARAGRAPH in COPY["paragraph"] and FUNCTION in COPY["rename"]


AGAIN = "~again"
"""The suffix of `--again`'s copy of a configuration."""


@dataclass
class Config:
    name: str
    side: str
    """"chatapp" or "server"."""
    args: tuple[str, ...] = ()


def configs(draft_max: int) -> list[Config]:
    """Both sides' configurations. The server's two sized drafters run at chatapp's draft_max and
    at 32 as well: ngram-mod proposing 32 was its best on the rename task when chatapp drafted at
    most 32, and the best of the server's drafters is what chatapp is held to."""
    sized = []
    for n in sorted({32, draft_max}):
        sized += [Config(f"server-ngram-simple@{n}", "server", ("--spec-type", "ngram-simple", "--spec-draft-n-max",
                                                               str(n), "--spec-ngram-simple-size-m", str(n))),
                  Config(f"server-ngram-mod@{n}", "server", ("--spec-type", "ngram-mod", "--spec-draft-n-max", str(n),
                                                            "--spec-ngram-mod-n-max", str(n), "--spec-ngram-mod-n-min",
                                                            str(n)))]
    return [
        Config("chatapp-ngram", "chatapp", ("--draft", "ngram")),
        Config("chatapp-plain", "chatapp", ("--draft", "off")),
        Config("server-plain", "server"),
        Config("server-ngram-simple", "server", ("--spec-type", "ngram-simple")),
        Config("server-ngram-mod", "server", ("--spec-type", "ngram-mod")),
        Config("server-ngram-cache", "server", ("--spec-type", "ngram-cache")),
        *sized,
    ]


@dataclass
class Run:
    tps: float
    reply: str
    tokens: int
    detail: str = ""
    extra: dict = field(default_factory=dict)


class Bench:
    def __init__(self, args):
        from chatapp.config import Settings
        from chatapp.engine.events import Message
        from chatapp.engine.models.resolve import resolve_model
        from chatapp.engine.opening import open_engine
        from chatapp.llama_tools import ensure_tools

        self.args = args
        self.model = resolve_model(args.model)
        self.server_bin = Path(args.server_bin) if args.server_bin else ensure_tools() / "llama-server"
        settings = Settings(threads=args.threads, kv_type=args.kv_type, n_ctx=args.ctx, draft="off")
        engine = open_engine(settings, str(self.model))
        self.system = settings.system_prompt
        self.prompts = {}
        for name, text in {**COPY, **CHAT}.items():
            self.prompts[name] = engine.prompt_ids([Message("system", self.system), Message("user", text)])
        engine.close()
        self.log_dir = Path(tempfile.mkdtemp(prefix="spec-vs-server-"))
        if args.cold:  # every process in a fresh home: nothing before it
            return
        # The exactness verdict is kept per machine; a first drafted process checks after its
        # turn. Do that once here, so that every timed run finds it (and say whether it did).
        warm = self.chatapp(Config("warm-up", "chatapp", ("--draft", "ngram")), "paragraph", COPY["paragraph"],
                            tokens=8)
        print(f"exactness verdict before the runs: {warm.extra.get('draft_check')}")

    def chatapp(self, config: Config, task: str, text: str, tokens: int | None = None) -> Run:
        a = self.args
        # --incognito: every ask is otherwise kept as a session, and warm runs would fill this
        # account's sessions list with hundreds of copies of the tasks.
        command = [str(Path(sys.executable).parent / "chatapp"), "ask", "--json", "--incognito", "--model",
                   str(self.model), "--threads", str(a.threads), "--kv-type", a.kv_type, "--temperature", "0",
                   "--ctx", str(a.ctx), "--max-tokens", str(tokens or a.tokens), "--draft-max", str(a.draft_max),
                   *config.args, text]
        if a.chatapp_f16:
            command[command.index("--kv-type") + 1] = "f16"
        with tempfile.TemporaryDirectory(prefix="spec-vs-server-home-") as home:
            env = os.environ.copy()
            if a.cold:  # a new user's home: no cached measurement, verdict or learned figures
                env |= {var: str(Path(home) / var) for var in ("XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_CACHE_HOME")}
            done = subprocess.run(command, capture_output=True, text=True, env=env)
        if done.returncode != 0:
            raise SystemExit(f"chatapp failed ({done.returncode}): {done.stderr[-2000:]}")
        record = json.loads(done.stdout.strip().splitlines()[-1])
        if record["prompt_tokens"] != len(self.prompts[task]):
            print(f"  ! {task}: chatapp's prompt has {record['prompt_tokens']} tokens, the server's "
                  f"{len(self.prompts[task])}")
        wall = record.get("decode_wall_ms") or record["decode_ms"]
        tps = record["generated_tokens"] / wall * 1000 if wall else 0.0
        detail = ""
        if record.get("draft") == "ngram":
            steps = max(record["decode_steps"], 1)
            detail = (f"steps {record['decode_steps']}, drafted {record['draft_tokens']}, accepted "
                      f"{record['draft_accepted']}, {record['decode_tokens'] / steps:.2f} tok/step")
        elif record.get("draft_off_because"):
            detail = f"not drafted: {record['draft_off_because'][:60]}"
        if a.cold:
            detail += f"; ttft - prefill {record['ttft_ms'] - record['prefill_ms']:.0f} ms"
        return Run(tps, record["reply"], record["generated_tokens"], detail, record)

    def server(self, config: Config, task: str, text: str) -> Run:
        a = self.args
        log = self.log_dir / f"{task}-{config.name}-{time.monotonic_ns()}.log"
        args = ("-t", str(a.threads), "-tb", str(a.threads), "-fa", "on", "-ctk", a.kv_type, "-ctv", a.kv_type,
                "-c", str(a.ctx), "-np", "1", *a.server_arg, *config.args)
        with llama_server(self.model, *args, log=log, binary=self.server_bin) as url:
            body = {"prompt": self.prompts[task], "n_predict": a.tokens, "temperature": 0.0, "seed": 1,
                    "cache_prompt": False, "stream": False}
            request = urllib.request.Request(f"{url}/completion", json.dumps(body).encode(),
                                             {"Content-Type": "application/json"})
            with urllib.request.urlopen(request, timeout=600) as response:
                data = json.loads(response.read())
        t = data["timings"]
        detail = ""
        if "draft_n" in t:
            steps = [line for line in log.read_text(errors="replace").splitlines() if "draft acceptance" in line]
            detail = (f"drafted {t['draft_n']}, accepted {t['draft_n_accepted']}"
                      + (f"; log: {steps[-1].split(':', 1)[-1].strip()[:90]}" if steps else ""))
        return Run(t["predicted_per_second"], data["content"], t["predicted_n"], detail, t)

    def run(self, config: Config, task: str, text: str) -> Run:
        return (self.chatapp if config.side == "chatapp" else self.server)(config, task, text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None)
    parser.add_argument("--rounds", type=int, default=3, help="Rounds per task; the run order alternates.")
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--kv-type", default="q8_0")
    parser.add_argument("--ctx", type=int, default=4096)
    parser.add_argument("--draft-max", type=int, default=None, help="chatapp's draft_max (default: the config's).")
    parser.add_argument("--tasks", default="copy,chat", help="copy, chat, or task names, comma-separated.")
    parser.add_argument("--configs", default=None, help="Configuration names, comma-separated (default: all).")
    parser.add_argument("--server-arg", action="append", default=[],
                        help="An extra llama-server argument (repeatable), e.g. --server-arg=--no-repack.")
    parser.add_argument("--server-bin", default=None, help="A llama-server to use (default: chatapp.llama_tools').")
    parser.add_argument("--chatapp-f16", action="store_true",
                        help="chatapp with an f16 cache setting (drafting then chooses its own KV type).")
    parser.add_argument("--cold", action="store_true",
                        help="A fresh home (XDG folders) for every chatapp process, and no warm-up run.")
    parser.add_argument("--again", default=None, metavar="NAME",
                        help="Run configuration NAME a second time in each round (as NAME~again) and "
                             "hold it to the best of the others, as chatapp is (an A/A check).")
    args = parser.parse_args()
    if args.draft_max is None:
        from chatapp.config import Settings

        args.draft_max = Settings().draft_max
    all_configs = configs(args.draft_max)
    chosen = all_configs if not args.configs else [c for c in all_configs if c.name in args.configs.split(",")]
    if args.again:
        twin = next((c for c in chosen if c.name == args.again), None)
        if twin is None:
            names = ", ".join(c.name for c in chosen)
            raise SystemExit(f"--again {args.again}: not among the configurations run ({names})")
        chosen.append(Config(f"{twin.name}{AGAIN}", twin.side, twin.args))
    tasks = {}
    for item in args.tasks.split(","):
        tasks |= COPY if item == "copy" else CHAT if item == "chat" else {item: {**COPY, **CHAT}[item]}
    bench = Bench(args)
    home = "cold: a fresh home for every chatapp process" if args.cold else "warm: chatapp in this account's home"
    print(f"{bench.model.name}, {args.threads} threads, KV {args.kv_type}, flash attention on, greedy, "
          f"{args.tokens} tokens at most, chatapp draft_max {args.draft_max}, {args.rounds} rounds, {home}; server "
          f"logs in {bench.log_dir}; load average at start {os.getloadavg()[0]:.2f}\n")
    results: dict[str, dict[str, list[Run]]] = {}
    for task, text in tasks.items():
        results[task] = {c.name: [] for c in chosen}
        for r in range(args.rounds):
            order = chosen if r % 2 == 0 else chosen[::-1]
            for config in order:
                run = bench.run(config, task, text)
                results[task][config.name].append(run)
                print(f"{task:10} round {r + 1} {config.name:26} {run.tps:7.1f} tok/s  {run.tokens:4d} tok  "
                      f"{run.detail}", flush=True)
        reference = results[task][chosen[0].name][0].reply
        for name, runs in results[task].items():
            for run in runs:
                if run.reply != reference:
                    print(f"  ! {task}: {name}'s reply differs from {chosen[0].name}'s: "
                          f"{run.reply[:80]!r} vs {reference[:80]!r}")
        report(task, results[task])
    summary(results, args)
    print(f"\nload average at the end {os.getloadavg()[0]:.2f}")


def ratios(a: list[Run], b: list[Run]) -> list[float]:
    return [x.tps / y.tps for x, y in zip(a, b) if y.tps]


def challengers(runs: dict[str, list[Run]]) -> list[str]:
    """The configurations held to the best server drafter: chatapp's drafting and `--again`'s copy."""
    return [name for name in runs if name == "chatapp-ngram" or name.endswith(AGAIN)]


def report(task: str, runs: dict[str, list[Run]]) -> None:
    medians = {name: statistics.median(r.tps for r in rs) for name, rs in runs.items() if rs}
    line = ", ".join(f"{name} {tps:.1f}" for name, tps in medians.items())
    print(f"{task}: median tok/s: {line}")
    for challenger in challengers(runs):
        for name in runs:
            if name == challenger:
                continue
            per_round = ratios(runs[challenger], runs[name])
            print(f"  {challenger} / {name:26} median {statistics.median(per_round):.3f}  rounds "
                  + " ".join(f"{x:.3f}" for x in per_round))
    if "server-plain" in runs:
        for name in runs:
            if name.startswith("server-ngram"):
                per_round = ratios(runs[name], runs["server-plain"])
                print(f"  {name} / server-plain{'':8} median {statistics.median(per_round):.3f}")
    print()


def summary(results: dict, args) -> None:
    print(f"summary ({'cold' if args.cold else 'warm'}; medians of per-round ratios):")
    for task, runs in results.items():
        servers = [n for n in runs if n.startswith("server-ngram") and not n.endswith(AGAIN)]
        best = max(servers, key=lambda n: statistics.median(r.tps for r in runs[n]), default=None)
        for challenger in challengers(runs):
            ours = runs[challenger]
            parts = []
            if best:
                parts.append(f"vs best server drafter ({best}) {statistics.median(ratios(ours, runs[best])):.3f}")
            for other in ("chatapp-plain", "server-plain", challenger.removesuffix(AGAIN)):
                if other in runs and other != challenger:
                    parts.append(f"vs {other} {statistics.median(ratios(ours, runs[other])):.3f}")
            print(f"  {task:10} {challenger}: " + "; ".join(dict.fromkeys(parts)))
    for group, names in (("copy", COPY), ("chat", CHAT)):
        rows = [statistics.median(ratios(runs["chatapp-ngram"], runs["chatapp-plain"]))
                for task, runs in results.items() if task in names and {"chatapp-ngram", "chatapp-plain"} <= set(runs)]
        if rows:
            geo = statistics.geometric_mean(rows)
            print(f"  {group} set: chatapp drafting / plain, geometric mean of task medians {geo:.3f}")


if __name__ == "__main__":
    main()
