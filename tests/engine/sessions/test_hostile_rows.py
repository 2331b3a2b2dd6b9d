"""A sessions.db edited with sqlite3 into types chatapp never writes: every row is read through
one typed reader, so a bad value is a notice and a stand-in, never a traceback, and the session
still opens, saves, exports, and keeps the damaged row as it was. An edited state key never
becomes a path."""

from __future__ import annotations

import json
import sqlite3

import pytest

from chatapp.config import Settings
from chatapp.engine.events import Message
from chatapp.engine.retrieval.context import RetrievedContext, RetrievedEntry, render
from chatapp.engine.retrieval.document import Attachment
from chatapp.engine.sessions import SessionManager
from chatapp.engine.sessions.export import session_data, to_markdown
from chatapp.engine.sessions.names import valid_state_key
from chatapp.engine.sessions.store import ModelIdentity, SessionStore, Snapshot, TurnRow
from chatapp.errors import SessionError

MODEL = ModelIdentity("m", "/models/m.gguf", "ab" * 32, "Q4_1")
NOTES = Attachment.from_text("notes.txt", "The staging server is called heron.\nIt listens on port 8443.\n")
ENTRY = RetrievedEntry(NOTES.name, NOTES.sha256, "", 1, 2, 20, None)
CONTEXT = RetrievedContext(render([(ENTRY, NOTES.text)]), (ENTRY,))
MESSAGES = [Message("system", "Be brief."), Message("user", "Which port?", context=CONTEXT),
            Message("assistant", "8443."), Message("user", "Thanks."), Message("assistant", "Welcome.")]


@pytest.fixture
def store(tmp_path) -> SessionStore:
    store = SessionStore.open(tmp_path)
    store.save(Snapshot("s", MODEL, MESSAGES, 1, 40, (NOTES,)),
               TurnRow(2, "CPU", 30, 20.0, {"reply": "8443.", "prompt_tokens": 30}))
    return store


def edit(store: SessionStore, sql: str, *args) -> None:
    with sqlite3.connect(store.path) as conn:
        conn.execute(sql, args)


def exported(store: SessionStore) -> str:
    """What `sessions show` and `export` build: the data, as JSON and as Markdown."""
    data = session_data(store, "s")
    return json.dumps(data) + to_markdown(data)


def test_a_blob_message_is_shown_as_unreadable_and_kept_as_it_is(store):
    edit(store, "UPDATE messages SET content = X'00FF' WHERE idx = 2")
    session = store.get("s")
    assert session.messages[2] == Message("assistant", "[unreadable message: the content of message 2 is a "
                                                       "2-byte BLOB, not text]")
    assert session.messages[:2] == MESSAGES[:2] and session.messages[3:] == MESSAGES[3:]
    assert session.notices == ("the content of message 2 is a 2-byte BLOB, not text; shown as unreadable",)
    assert "[unreadable message" in exported(store)

    # A turn added after it is saved, and the row itself stays as the database had it.
    more = [*session.messages, Message("user", "Bye."), Message("assistant", "Bye!")]
    store.save(Snapshot("s", MODEL, more, 1, 50, (NOTES,)), base=session.revision)
    assert store.get("s").messages[5:] == more[5:]
    with sqlite3.connect(store.path) as conn:
        assert conn.execute("SELECT content FROM messages WHERE idx = 2").fetchone() == (b"\x00\xff",)


def test_a_message_of_an_unknown_role_is_shown_as_unreadable(store):
    edit(store, "UPDATE messages SET role = 'robot' WHERE idx = 3")
    session = store.get("s")
    assert session.messages[3].role == "user" and "role of message 3 is the text 'robot'" in \
        session.messages[3].content


def test_a_blob_attachment_is_dropped_with_a_notice(store):
    edit(store, "UPDATE attachments SET text = X'0102'")
    session = store.get("s")
    assert session.attachments == ()
    assert session.notices == ("attachment dropped: notes.txt: its saved text is a 2-byte BLOB, not text",)
    assert session.messages == MESSAGES


@pytest.mark.parametrize("column", ["name", "kind", "sha256", "page_starts"])
def test_any_attachment_column_of_another_type_drops_only_that_attachment(store, column):
    edit(store, f"UPDATE attachments SET {column} = X'07'")  # a TEXT column stores a number as text: a BLOB
    session = store.get("s")
    assert session.attachments == () and len(session.notices) == 1
    assert session.notices[0].startswith("attachment dropped: ") and "a 1-byte BLOB" in session.notices[0]


@pytest.mark.parametrize("record", [
    {"text": 5, "entries": []},
    {"text": "x", "entries": [{"file": 3}]},
    {"text": "x", "entries": [{**ENTRY.to_record(), "start_line": "one"}]},
    {"text": "x", "entries": "none"},
    [1, 2],
])
def test_a_retrieved_block_of_another_shape_is_left_out(store, record):
    edit(store, "UPDATE messages SET context = ? WHERE idx = 1", json.dumps(record))
    session = store.get("s")
    assert session.messages[1] == Message("user", "Which port?")  # the question stays, without the block
    [notice] = session.notices
    assert notice.startswith("the attachment text placed in message 1 could not be read (") and "left out" in notice
    exported(store)


def test_a_text_revision_reads_as_zero_and_the_next_save_writes_a_number(store):
    edit(store, "UPDATE sessions SET revision = 'abc'")
    session = store.get("s")
    assert session.revision.number == 0
    assert session.notices == ("session row: its revision is the text 'abc', not a whole number; read as 0",)
    saved = store.save(Snapshot("s", MODEL, [*session.messages, Message("user", "Bye.")], 1, 50, (NOTES,)),
                       base=session.revision)
    assert saved.revision.number == 1 and store.current(session.revision.session_id) == ("s", 1)


def test_wrong_types_in_the_session_row_are_read_as_stand_ins(store):
    edit(store, "UPDATE sessions SET created_at = 'x', model = X'00', quant = X'04', window_start = 'w',"
                " kv_tokens = 1.5")
    session = store.get("s")
    assert (session.created_at, session.model.name, session.model.quant) == (0.0, "unknown", "unknown")
    assert (session.window_start, session.kv_tokens) == (0, 0) and len(session.notices) == 5
    [summary] = store.summaries()
    assert (summary.model, summary.quant, summary.created_at) == ("unknown", "unknown", 0.0)
    assert "Model: unknown (unknown)" in exported(store)


def test_a_damaged_turn_record_shows_no_figures(store):
    edit(store, "UPDATE turns SET record = X'7B7D', message_idx = 'two'")
    assert store.turn_records("s") == [(-1, {})]
    exported(store)


# --- state keys ---------------------------------------------------------------------------------
def test_an_edited_state_key_names_no_file_and_the_next_save_replaces_it(store, tmp_path):
    outside = tmp_path.parent / f"{tmp_path.name}-evil.kvstate"
    outside.write_bytes(b"not ours")
    edit(store, "UPDATE sessions SET state_key = ?", f"../../{tmp_path.parent.name}/{tmp_path.name}-evil")
    manager = SessionManager(store, 1 << 30)
    session = store.get("s")
    with pytest.raises(SessionError, match="is not one chatapp writes"):
        manager.state_path(session.state_key)
    assert manager.state_size(session.state_key) is None

    saved = store.save(Snapshot("s", MODEL, [*session.messages, Message("user", "Bye.")], 1, 50, (NOTES,)),
                       base=session.revision)
    assert valid_state_key(saved.state_key) and store.get("s").state_key == saved.state_key
    assert outside.read_bytes() == b"not ours"


def test_removing_a_session_with_an_edited_state_key_removes_no_file(store, tmp_path):
    outside = tmp_path.parent / f"{tmp_path.name}-evil.kvstate"
    outside.write_bytes(b"not ours")
    (tmp_path / "states").mkdir()
    edit(store, "UPDATE sessions SET state_key = ?", f"../../{tmp_path.parent.name}/{tmp_path.name}-evil")
    SessionManager.open(Settings(), tmp_path).delete("s")
    assert store.load("s") is None and outside.read_bytes() == b"not ours"


@pytest.mark.parametrize("key", ["", "../x", "ABCDEF0123456789ABCDEF0123456789", "0" * 31, "0" * 33, 7, None])
def test_only_the_key_format_chatapp_writes_is_valid(key):
    assert not valid_state_key(key)
    assert valid_state_key("0123456789abcdef" * 2)
