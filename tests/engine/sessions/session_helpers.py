"""Shared by the session tests and the saver subprocess: engines and synthetic histories."""

from __future__ import annotations

from pathlib import Path

from chatapp.config import Settings
from chatapp.engine.chat.engine import Engine
from chatapp.engine.events import Message
from chatapp.engine.local.llama import LlamaRuntime, LoadOptions
from chatapp.engine.local.backend import LocalBackend

SETTINGS = Settings(n_ctx=1024, temperature=0.0, max_tokens=16, system_prompt="You are a concise assistant.")


def open_engine(model_path: Path, n_ctx: int = 1024, kv_type: str = "f16") -> Engine:
    settings = SETTINGS.replace(n_ctx=n_ctx, kv_type=kv_type)
    runtime = LlamaRuntime(model_path, LoadOptions(n_ctx=n_ctx, kv_type=kv_type, n_threads=settings.threads))
    return Engine(LocalBackend(runtime), settings)


def synthetic_history(tag: str, pairs: int) -> list[Message]:
    messages = [Message("system", SETTINGS.system_prompt)]
    for i in range(pairs):
        messages.append(Message("user", f"{tag} question {i}: what comes after {i}?"))
        messages.append(Message("assistant", f"{tag} answer {i}: the number {i + 1} comes after {i}."))
    return messages


def prefill_history(engine: Engine, messages: list[Message]) -> None:
    """Load a transcript and fill the KV cache with it, without generating."""
    engine.load_conversation(messages)
    engine.clear_cache()
    engine._backend.runtime.eval(engine.prompt_ids())  # a test helper fills the cache directly


def run_turn(engine: Engine, text: str):
    return list(engine.send(text))[-1].record


OLD_DATABASES = Path(__file__).parents[2] / "data" / "sessions"
"""Databases older schemas wrote (tests/data/sessions/make_schemaN.py says how each was made)."""


def migrated_copy(version: int, folder: Path, columns: str = "idx, role, id, parent, content, thinking"):
    """Open a copy of the database schema `version` wrote (schemaN.db) in `folder`, which brings it
    to SCHEMA_VERSION: checked before and after, with `columns` of every message unchanged."""
    import shutil
    import sqlite3

    from chatapp.engine.sessions.schema import SCHEMA_VERSION
    from chatapp.engine.sessions.store import DB_NAME, SessionStore

    shutil.copy(OLD_DATABASES / f"schema{version}.db", folder / DB_NAME)
    read = f"SELECT {columns} FROM messages ORDER BY idx"
    with sqlite3.connect(folder / DB_NAME) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == version
        before = conn.execute(read).fetchall()
    store = SessionStore.open(folder)
    with sqlite3.connect(folder / DB_NAME) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION > version
        assert conn.execute(read).fetchall() == before
    return store


def saved(store) -> str:
    """A session "s" in `store` (a SessionStore) with one question and its reply; the reply's id."""
    from chatapp.engine.sessions.store import ModelIdentity, Snapshot

    model = ModelIdentity("m", "/models/m.gguf", "ab" * 32, "Q4_1")
    store.save(Snapshot("s", model, [Message("user", "Hi."), Message("assistant", "Hello.")], 0, 10))
    return next(m.id for m in store.get("s").tree if m.role == "assistant")


def search_index_disagreements(database: Path) -> list[str]:
    """What the search index (chatapp.engine.sessions.search_index) holds that the messages table
    does not, or lacks that it does: every message but the system prompt once, under its rowid,
    with its text and thought; and FTS5's own check that its postings match the text it keeps.
    [] when they agree."""
    import sqlite3

    with sqlite3.connect(database) as conn:
        messages = conn.execute("SELECT rowid, content, thinking FROM messages WHERE role != 'system'"
                                " ORDER BY rowid").fetchall()
        indexed = conn.execute("SELECT rowid, body, thinking FROM message_text ORDER BY rowid").fetchall()
        problems = [f"only in messages: {row}" for row in sorted(set(messages) - set(indexed))]
        problems += [f"only in the index: {row}" for row in sorted(set(indexed) - set(messages))]
        try:
            conn.execute("INSERT INTO message_text (message_text) VALUES ('integrity-check')")
        except sqlite3.DatabaseError as exc:
            problems.append(f"FTS5 integrity-check: {exc}")
    return problems
