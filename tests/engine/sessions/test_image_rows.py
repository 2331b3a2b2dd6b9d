"""A session keeps its questions' images (schema 9): the hashes with each message, each image's
bytes once, migrated from a database schema 8 wrote, checked against its hash when read."""

from __future__ import annotations

import sqlite3

from chatapp.engine.events import Message
from chatapp.engine.images import image_sha
from chatapp.engine.sessions.store import DB_NAME, ModelIdentity, Snapshot
from tests.engine.local.vision import picture
from tests.engine.sessions.session_helpers import migrated_copy

MODEL = ModelIdentity("m", "/models/m.gguf", "ab" * 32, "Q4_1")


def test_a_schema_8_database_migrates_and_keeps_images_from_then_on(tmp_path):
    store = migrated_copy(8, tmp_path)
    old = store.get("lighthouse")
    assert [m.content for m in old.tree if m.role == "user"] == ["What colour is the lighthouse?",
                                                                  "Describe the lighthouse."]
    assert all(m.images == () for m in old.tree) and old.images == () and not old.notices

    boat, cat = picture(5), picture(6)
    messages = [*old.messages, Message("user", "And this one?", images=(image_sha(boat), image_sha(cat))),
                Message("assistant", "A boat and a cat.")]
    kept = ((image_sha(boat), "boat.png", boat), (image_sha(cat), "cat.png", cat))
    store.save(Snapshot("lighthouse", MODEL, messages, 1, 60, images=kept), base=old.revision,
               seen=frozenset(m.id for m in old.messages if m.id))  # the shown path: the other branch stays
    again = store.get("lighthouse")
    asked = next(m for m in again.messages if m.content == "And this one?")
    assert asked.images == (image_sha(boat), image_sha(cat))
    assert sorted(again.images) == sorted(kept)
    assert {m.content for m in again.tree if m.role == "user"} == {
        "What colour is the lighthouse?", "Describe the lighthouse.", "And this one?"}  # the other branch kept


def test_an_image_whose_bytes_fail_their_hash_is_dropped_and_said(tmp_path):
    store = migrated_copy(8, tmp_path)
    boat = picture(5)
    store.save(Snapshot("s", MODEL, [Message("user", "What is this?", images=(image_sha(boat),))], 0, 10,
                        images=((image_sha(boat), "boat.png", boat),)))
    with sqlite3.connect(tmp_path / DB_NAME) as conn:
        conn.execute("UPDATE images SET data = ?", (boat[:-1] + b"\0",))
    broken = store.get("s")
    assert broken.images == ()
    assert any("image dropped: boat.png: its bytes do not match its sha256" in n for n in broken.notices)
    with sqlite3.connect(tmp_path / DB_NAME) as conn:
        conn.execute("UPDATE messages SET images = 'not-a-hash' WHERE role = 'user'")
    odd = store.get("s")
    assert odd.messages[-1].images == () and any("not sha256s" in n for n in odd.notices)


def test_an_image_no_message_names_any_more_leaves_the_database(tmp_path):
    store = migrated_copy(8, tmp_path)
    boat = picture(5)
    store.save(Snapshot("s", MODEL, [Message("user", "What is this?", images=(image_sha(boat),))], 0, 10,
                        images=((image_sha(boat), "boat.png", boat),)))
    first = store.get("s")
    store.save(Snapshot("s", MODEL, [Message("user", "What is this?", id=first.messages[-1].id)], 0, 10),
               base=first.revision, seen=frozenset(m.id for m in first.tree if m.id))
    with sqlite3.connect(tmp_path / DB_NAME) as conn:
        assert conn.execute("SELECT count(*) FROM images").fetchone() == (0,)
