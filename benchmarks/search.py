"""Full-text search over every saved message (chatapp.engine.sessions.search), at scale.

1. Search: a sessions database of 10,000 sessions of 20 messages each (200,000 messages; the
   words drawn from a 20,000-word vocabulary by a Zipf law, as text's words are, a third of
   the replies with a thought) is built through the schema's triggers. Each query, from a word
   in a fifth of all messages to one in a few, a phrase, a prefix, an OR, runs `search` as
   `chatapp sessions search` does (20 hits, their snippets and the branch each opens):
   the median of its runs. Target: <= 50 ms median.
2. Transcript save: `SessionStore.save` of one turn (a question and its reply appended to a
   session of that database) with the index's triggers and without them, on two copies of
   the same database, alternating.
3. A turn's save: what a chat does after each turn (`LiveSession.save_turn`: the transcript,
   then the KV state of the branch), timed by its SaveReport, on the real default model: two
   engines chat the same questions at temperature 0, one into a database with the index, one
   into a copy of it without its triggers, alternating which saves first.
   Target: the index adds <= 5% to the median turn's save.

    .venv/bin/python benchmarks/search.py [--sessions 10000] [--runs 21] [--saves 60] [--turns 30]
"""

from __future__ import annotations

import argparse
import itertools
import random
import shutil
import sqlite3
import statistics
import tempfile
import time
from pathlib import Path

from chatapp.engine.events import Message
from chatapp.engine.sessions.search import search
from chatapp.engine.sessions.search_index import TRIGGERS
from chatapp.engine.sessions.store import ModelIdentity, SessionStore, Snapshot

MODEL = ModelIdentity("SmolLM2-135M-Instruct", "/models/m.gguf", "ab" * 32, "Q4_1")
VOCABULARY = 20_000
MESSAGES_PER_SESSION = 20


RANKS = range(VOCABULARY)
ZIPF = list(itertools.accumulate(1 / (rank + 1) for rank in RANKS))
"""Cumulative weights of a Zipf law over the vocabulary: the word of rank r is drawn in
proportion to 1/r, as the words of text are."""


def words(rng: random.Random, count: int) -> str:
    return " ".join(f"w{rank}" for rank in rng.choices(RANKS, cum_weights=ZIPF, k=count))


def build(directory: Path, sessions: int) -> SessionStore:
    """The database, written in one transaction per 500 sessions straight into its tables (a
    save each would spend minutes on fsyncs): the triggers index every message as a save would."""
    store = SessionStore.open(directory)
    rng = random.Random(7)
    conn = sqlite3.connect(store.path, isolation_level=None)
    now = time.time() - sessions * 60
    for start in range(0, sessions, 500):
        conn.execute("BEGIN")
        for n in range(start, min(start + 500, sessions)):
            when = now + n * 60
            session_id = conn.execute(
                "INSERT INTO sessions (name, state_key, model, model_path, model_sha256, quant, system_prompt,"
                " window_start, kv_tokens, created_at, updated_at, revision) VALUES (?,?,?,?,?,?,?,1,0,?,?,1)",
                (f"chat {n}", f"{n:032x}", MODEL.name, MODEL.path, MODEL.sha256, MODEL.quant, "Be brief.",
                 when, when)).lastrowid
            conn.execute("INSERT INTO messages (session_id, idx, role, content, created_at)"
                         " VALUES (?, 0, 'system', 'Be brief.', ?)", (session_id, when))
            parent = None
            for i in range(1, MESSAGES_PER_SESSION + 1):
                role = "user" if i % 2 else "assistant"
                text = words(rng, rng.randint(8, 25) if role == "user" else rng.randint(20, 80))
                thought = words(rng, 40) if role == "assistant" and rng.random() < 1 / 3 else ""
                message_id = f"{n % 0x10000:04x}{i:04x}"
                conn.execute("INSERT INTO messages (session_id, idx, role, content, thinking, created_at, id, parent)"
                             " VALUES (?,?,?,?,?,?,?,?)", (session_id, i, role, text, thought, when, message_id,
                                                           parent))
                parent = message_id
            conn.execute("UPDATE sessions SET active_leaf = ? WHERE id = ?", (parent, session_id))
        conn.execute("COMMIT")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    return store


def share(store: SessionStore, word: str) -> float:
    with store.reading() as conn:
        (matching,) = conn.execute("SELECT count(*) FROM message_text WHERE message_text MATCH ?", (word,)).fetchone()
        (total,) = conn.execute("SELECT count(*) FROM message_text").fetchone()
    return matching / total


def time_searches(store: SessionStore, runs: int) -> list[tuple[str, float, int]]:
    queries = ["w0", "w3", "w100", "w2000", "w19000", '"w0 w1"', "w123*", "w500 OR w501", "w1 NOT w2"]
    results = []
    for query in queries:
        search(store, query)  # the pages it reads, read once
        times = []
        for _ in range(runs):
            started = time.perf_counter()
            hits = search(store, query)
            times.append((time.perf_counter() - started) * 1000)
        results.append((query, statistics.median(times), len(hits)))
    return results


def time_saves(directory: Path, name: str, saves: int) -> tuple[float, float]:
    """Median ms of one turn's save with the index's triggers and without, alternating."""
    copies = {}
    for arm in ("indexed", "bare"):
        folder = directory / arm
        folder.mkdir()
        shutil.copy(directory / "search" / "sessions.db", folder / "sessions.db")
        copies[arm] = SessionStore.open(folder)
    with sqlite3.connect(copies["bare"].path) as conn:  # after open: it would build them again
        for trigger in TRIGGERS:
            conn.execute(f"DROP TRIGGER {trigger}")
    state = {}
    for arm, store in copies.items():
        stored = store.get(name)
        state[arm] = (stored.tree, stored.revision, frozenset(m.id for m in stored.tree if m.id))
    rng = random.Random(3)
    times: dict[str, list[float]] = {"indexed": [], "bare": []}
    for n in range(saves):
        question = Message("user", words(rng, 16))
        reply = Message("assistant", words(rng, 60), thinking=words(rng, 40))
        for arm in (("indexed", "bare") if n % 2 else ("bare", "indexed")):
            tree, revision, seen = state[arm]
            messages = [*tree, question, reply]
            started = time.perf_counter()
            saved = copies[arm].save(Snapshot(name, MODEL, messages, 1, 0), base=revision, seen=seen)
            times[arm].append((time.perf_counter() - started) * 1000)
            state[arm] = (copies[arm].get(name).tree, saved.revision, saved.ids)
    return statistics.median(times["indexed"]), statistics.median(times["bare"])


def time_turn_saves(directory: Path, turns: int, threads: int) -> tuple[float, float]:
    """Median save_ms of a turn's save (transcript and KV state) with the index and without."""
    from chatapp.config import Settings
    from chatapp.engine.chat.engine import Engine
    from chatapp.engine.local.backend import LocalBackend
    from chatapp.engine.models.resolve import resolve_model
    from chatapp.engine.sessions import SessionManager

    settings = Settings(n_ctx=2048, temperature=0.0, max_tokens=24, threads=threads,
                        system_prompt="You are a concise assistant.")
    arms = {}
    for arm in ("indexed", "bare"):
        manager = SessionManager.open(settings, directory / f"turns-{arm}")
        shutil.copy(directory / "search" / "sessions.db", manager.store.path)
        manager = SessionManager.open(settings, directory / f"turns-{arm}")
        if arm == "bare":
            with sqlite3.connect(manager.store.path) as conn:
                for trigger in TRIGGERS:
                    conn.execute(f"DROP TRIGGER {trigger}")
        engine = Engine(LocalBackend.load(resolve_model(None, settings), settings), settings)
        arms[arm] = (engine, manager.resume("turn saves", engine))
    times: dict[str, list[float]] = {"indexed": [], "bare": []}
    for n in range(turns):
        if n % 12 == 0:  # a fresh chat now and then, so the context never fills
            for engine, live in arms.values():
                engine.new_chat()
        question = f"Question {n}: name one animal that lives near a harbour, in a few words."
        order = ("indexed", "bare") if n % 2 else ("bare", "indexed")
        records = {arm: list(arms[arm][0].send(question))[-1].record for arm in order}
        for arm in order:
            times[arm].append(arms[arm][1].save_turn(records[arm]).save_ms)
    for engine, _ in arms.values():
        engine.close()
    return statistics.median(times["indexed"]), statistics.median(times["bare"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sessions", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=21)
    parser.add_argument("--saves", type=int, default=60)
    parser.add_argument("--turns", type=int, default=30, help="Turns of the turn-save figure (0: skip it).")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        directory = Path(folder)
        started = time.perf_counter()
        store = build(directory / "search", args.sessions)
        built_s = time.perf_counter() - started
        print(f"{args.sessions:,} sessions, {args.sessions * MESSAGES_PER_SESSION:,} messages: built and indexed "
              f"in {built_s:.1f} s, {store.path.stat().st_size / 2**20:,.0f} MiB")
        with sqlite3.connect(store.path) as conn:  # what the migration of such a database costs
            conn.execute("BEGIN")
            started = time.perf_counter()
            from chatapp.engine.sessions.search_index import build as build_index
            build_index(conn)
            print(f"index built again from the messages (schema 8's migration): {time.perf_counter() - started:.1f} s")
            conn.execute("ROLLBACK")
        print(f"\n{'query':<14} {'in messages':>11} {'hits':>5} {'median ms':>10}")
        results = time_searches(store, args.runs)
        for query, ms, hits in results:
            print(f"{query:<14} {share(store, query):>10.2%} {hits:>5} {ms:>10.2f}")
        overall = statistics.median(ms for _, ms, _ in results)
        print(f"median over the queries: {overall:.2f} ms (target <= 50), slowest {max(r[1] for r in results):.2f} ms")
        indexed, bare = time_saves(directory, f"chat {args.sessions // 2}", args.saves)
        print(f"\nthe transcript's save alone, median of {args.saves}: {indexed:.2f} ms with the index, {bare:.2f} ms "
              f"without: +{indexed - bare:.2f} ms")
        if args.turns:
            indexed, bare = time_turn_saves(directory, args.turns, args.threads)
            print(f"a turn's save (transcript and KV state), median of {args.turns}: {indexed:.2f} ms with the "
                  f"index, {bare:.2f} ms without: {(indexed / bare - 1) * 100:+.1f}% (target <= 5%)")


if __name__ == "__main__":
    main()
