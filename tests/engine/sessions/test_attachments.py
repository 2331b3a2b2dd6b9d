"""Saved sessions keep attachments (text and sha256) and each message's retrieved block."""

from __future__ import annotations

import sqlite3

from chatapp.engine.events import Message
from chatapp.engine.retrieval.context import RetrievedContext, RetrievedEntry, render
from chatapp.engine.retrieval.document import Attachment
from chatapp.engine.sessions.schema import MIGRATIONS, SCHEMA_VERSION
from chatapp.engine.sessions.store import DB_NAME, ModelIdentity, SessionStore, Snapshot

MODEL = ModelIdentity("m", "/models/m.gguf", "ab" * 32, "Q4_1")
NOTES = Attachment.from_text("notes.txt", "The staging server is called heron.\nIt listens on port 8443.\n")
MANUAL = Attachment.from_text("manual.pdf", "Page one.\n\nPage two.", kind="pdf", page_starts=(1, 3))


def context_for(attachment: Attachment) -> RetrievedContext:
    entry = RetrievedEntry(attachment.name, attachment.sha256, "", 1, 2, 20, None)
    return RetrievedContext(render([(entry, attachment.text)]), (entry,))


def snapshot(*attachments: Attachment) -> Snapshot:
    messages = [Message("system", "Be brief."), Message("user", "Which port?", context=context_for(NOTES)),
                Message("assistant", "8443."), Message("user", "Thanks.")]
    return Snapshot("s", MODEL, messages, 1, 40, tuple(attachments))


def test_attachments_and_retrieved_blocks_come_back_as_saved(tmp_path):
    store = SessionStore.open(tmp_path)
    store.save(snapshot(NOTES, MANUAL))
    loaded = store.get("s")
    assert loaded.messages == snapshot().messages
    assert loaded.messages[1].context == context_for(NOTES)
    assert loaded.attachments == (NOTES, MANUAL) and loaded.notices == ()
    store.save(snapshot(MANUAL))  # detached one
    assert store.get("s").attachments == (MANUAL,)


def test_an_attachment_whose_text_no_longer_matches_its_hash_is_dropped_with_a_notice(tmp_path):
    store = SessionStore.open(tmp_path)
    store.save(snapshot(NOTES, MANUAL))
    with sqlite3.connect(store.path) as conn:
        conn.execute("UPDATE attachments SET text = 'edited behind our back' WHERE name = 'notes.txt'")
    loaded = store.get("s")
    assert loaded.attachments == (MANUAL,)
    assert loaded.notices == ("attachment dropped: notes.txt: the saved text does not match its sha256",)
    assert loaded.messages == snapshot().messages  # the conversation is all there


def test_a_version_1_database_is_migrated_and_its_sessions_load(tmp_path):
    path = tmp_path / DB_NAME
    with sqlite3.connect(path) as conn:
        for statement in MIGRATIONS[0]:
            conn.execute(statement)
        conn.execute("PRAGMA user_version = 1")
        conn.execute("INSERT INTO sessions (id, name, state_key, model, model_path, model_sha256, quant,"
                     " system_prompt, window_start, kv_tokens, created_at, updated_at)"
                     " VALUES (1, 'old', 'k', 'm', '/m', 'ab', 'Q4_1', '', 0, 0, 0, 0)")
        conn.execute("INSERT INTO messages VALUES (1, 0, 'user', 'hello', 0, 0)")
    store = SessionStore.open(tmp_path)
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION >= 5
    old = store.get("old")
    assert old.messages == [Message("user", "hello")] and old.attachments == ()
