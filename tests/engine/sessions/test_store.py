"""The SQLite transcript store: schema version, migrations, one-transaction saves, names, files."""

from __future__ import annotations

import os
import sqlite3
import threading

import pytest

from chatapp.engine.events import Message
from chatapp.engine.sessions.files import atomic_write, clean_temp_files, evict_lru, temp_path
from chatapp.engine.sessions.names import validate_name
from chatapp.engine.sessions.schema import SCHEMA_VERSION
from chatapp.engine.sessions.store import DB_NAME, ModelIdentity, SessionStore, Snapshot, TurnRow
from chatapp.errors import SessionConflict, SessionError

MODEL = ModelIdentity("m", "/models/m.gguf", "ab" * 32, "Q4_1")


def snapshot(name: str, *texts: str, window_start: int = 1) -> Snapshot:
    messages = [Message("system", "Be brief.")]
    for i, text in enumerate(texts):
        messages.append(Message("user" if i % 2 == 0 else "assistant", text))
    return Snapshot(name, MODEL, messages, window_start, kv_tokens=10 * len(texts))


def turn(index: int, tokens: int = 100, ms: float = 50.0) -> TurnRow:
    return TurnRow(index, "CPU", tokens, ms, {"prefill_tokens": tokens, "prefill_ms": ms, "reply": "r"})


def test_a_new_database_has_our_schema_version_and_wal(tmp_path):
    store = SessionStore.open(tmp_path / "s")
    conn = sqlite3.connect(store.path)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_reading_without_create_writes_nothing(tmp_path):
    store = SessionStore.open(tmp_path / "none", create=False)
    assert store.summaries() == [] and store.load("x") is None
    assert not (tmp_path / "none").exists()


def test_a_database_from_a_newer_chatapp_is_refused(tmp_path):
    store = SessionStore.open(tmp_path)
    conn = sqlite3.connect(store.path)
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 7}")
    conn.close()
    for create in (True, False):
        with pytest.raises(SessionError, match=rf"newer chatapp \(schema {SCHEMA_VERSION + 7} > {SCHEMA_VERSION}\)"):
            SessionStore.open(tmp_path, create=create)


def test_an_older_database_is_migrated(tmp_path):
    sqlite3.connect(tmp_path / DB_NAME).close()  # version 0: empty
    store = SessionStore.open(tmp_path)
    store.save(snapshot("a", "hi", "hello"), turn(2))
    assert store.get("a").messages[-1].content == "hello"


def test_a_damaged_database_is_a_session_error(tmp_path):
    (tmp_path / DB_NAME).write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(SessionError, match="session database"):
        SessionStore.open(tmp_path)


def test_save_and_load_round_trip(tmp_path):
    store = SessionStore.open(tmp_path)
    snap = snapshot("a", "hi", "hello", "more?", "sure")
    saved = store.save(snap, turn(4))
    loaded = store.get("a")
    assert loaded.messages == snap.messages and loaded.state_key == saved.state_key
    assert loaded.revision == saved.revision and saved.revision.number == 1
    assert loaded.system_prompt == "Be brief." and loaded.model == MODEL and loaded.window_start == 1
    again = store.save(snapshot("a", "hi", "hello", "more?", "sure"), base=saved.revision)
    assert again.state_key == saved.state_key and again.revision.number == 2  # the key is stable
    [summary] = store.summaries()
    assert (summary.name, summary.turns, summary.kv_tokens) == ("a", 2, 40)


def test_a_diverging_transcript_replaces_the_tail_and_its_turn_records(tmp_path):
    store = SessionStore.open(tmp_path)
    base = store.save(snapshot("a", "q1", "a1"), turn(2)).revision
    base = store.save(snapshot("a", "q1", "a1", "q2", "a2"), turn(4), base=base).revision
    regenerated = snapshot("a", "q1", "a1", "q2", "a2 again")
    regenerated.messages[-1] = Message("assistant", "a2 again", stopped=True)
    base = store.save(regenerated, turn(4, 7), base=base).revision
    loaded = store.get("a")
    assert [m.content for m in loaded.messages] == ["Be brief.", "q1", "a1", "q2", "a2 again"]
    assert loaded.messages[-1].stopped
    assert [(i, r["prefill_tokens"]) for i, r in store.turn_records("a")] == [(2, 100), (4, 7)]
    store.save(snapshot("a", "other"), base=base)
    assert store.turn_records("a") == []


def test_prefill_speed_from_recent_turns(tmp_path):
    store = SessionStore.open(tmp_path)
    assert store.prefill_speed(MODEL.sha256, "CPU") is None
    store.save(snapshot("a", "q", "a"), turn(2, 1000, 500.0))
    store.save(snapshot("a", "q", "a", "q", "a"), turn(4, 3000, 1500.0))  # appends: it holds the stored turn
    store.save(snapshot("b", "q", "a"), turn(2, 4, 100.0))  # too small to count
    assert store.prefill_speed(MODEL.sha256, "CPU") == pytest.approx(2000.0)
    assert store.prefill_speed(MODEL.sha256, "CUDA") is None


def test_rename_and_delete(tmp_path):
    store = SessionStore.open(tmp_path)
    store.save(snapshot("a", "q"))
    store.save(snapshot("b", "q"))
    with pytest.raises(SessionError, match="already exists"):
        store.rename("a", "b")
    store.rename("a", "c")
    with pytest.raises(SessionError, match="no session named 'a'"):
        store.get("a")
    store.delete("c")
    assert [s.name for s in store.summaries()] == ["b"]
    with pytest.raises(SessionError, match="no session named 'c'"):
        store.delete("c")


def test_threads_saving_the_same_session_never_interleave_or_lose_a_turn(tmp_path):
    store = SessionStore.open(tmp_path)
    outcomes: dict[str, list[str]] = {tag: [] for tag in "xyz"}

    def saver(tag: str) -> None:
        base = None
        for i in range(15):
            try:
                base = store.save(snapshot("shared", *(f"{tag}{i}-{j}" for j in range(6))), turn(6),
                                  base=base).revision
                outcomes[tag].append("saved")
            except SessionConflict:
                outcomes[tag].append("refused")
            except Exception as exc:  # noqa: BLE001
                outcomes[tag].append(repr(exc))

    threads = [threading.Thread(target=saver, args=(tag,)) for tag in "xyz"]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert {o for outcome in outcomes.values() for o in outcome} <= {"saved", "refused"}
    contents = [m.content for m in store.get("shared").messages[1:]]
    assert len(contents) == 6 and len({c.split("-")[0] for c in contents}) == 1
    winner = contents[0][0]
    # The first save created the session; after it, only its writer may replace its own turns.
    assert outcomes[winner].count("saved") == 15
    assert all(set(outcome) == {"refused"} for tag, outcome in outcomes.items() if tag != winner)


def test_two_openers_of_a_new_database_both_open_it(tmp_path):
    """CI: the TUI opens the database on a worker at start while a fast first question keeps
    the chat, and SQLite refused the second switch to WAL at once ("database is locked"), so the
    chat was not kept. Here 7 of 60 pairs failed before; every pair opens now."""
    for attempt in range(40):
        folder = tmp_path / str(attempt)
        problems: list[str] = []

        def opener() -> None:
            try:
                SessionStore.open(folder)
            except SessionError as exc:
                problems.append(str(exc))

        threads = [threading.Thread(target=opener) for _ in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert problems == [], (attempt, problems)
        assert SessionStore.open(folder, create=False).summaries() == []


def test_a_writer_that_has_not_seen_the_stored_turns_is_refused_and_writes_nothing(tmp_path):
    store = SessionStore.open(tmp_path)
    base = store.save(snapshot("s", "q1", "a1"), turn(2)).revision
    other = store.save(snapshot("s", "q1", "a1", "other q", "other a"), turn(4), base=base)  # another process
    with pytest.raises(SessionConflict, match="session changed by another process"):
        store.save(snapshot("s", "q1", "a1", "my q", "my a"), turn(4), base=base)
    assert [m.content for m in store.get("s").messages][3:] == ["other q", "other a"]
    assert store.get("s").revision == other.revision
    assert SessionConflict.exit_code == 1


def test_a_writer_whose_transcript_holds_the_stored_one_appends_after_it(tmp_path):
    store = SessionStore.open(tmp_path)
    base = store.save(snapshot("s", "q1", "a1"), turn(2)).revision
    store.save(snapshot("s", "q1", "a1"), base=base)  # another process saved the same (e.g. on quit)
    saved = store.save(snapshot("s", "q1", "a1", "q2", "a2"), turn(4), base=base)
    assert saved.appended and saved.revision.number == 3
    assert [m.content for m in store.get("s").messages][1:] == ["q1", "a1", "q2", "a2"]
    assert [i for i, _ in store.turn_records("s")] == [2, 4]
    # A new session created meanwhile by another process is appended to in the same way.
    store.save(snapshot("t"))
    assert store.save(snapshot("t", "q", "a"), turn(2)).appended


def test_a_removed_session_is_not_resurrected_and_a_renamed_one_is_followed(tmp_path):
    store = SessionStore.open(tmp_path)
    base = store.save(snapshot("gone", "q1", "a1"), turn(2)).revision
    store.delete("gone")
    with pytest.raises(SessionConflict, match="'gone' was removed by another process"):
        store.save(snapshot("gone", "q1", "a1", "q2", "a2"), turn(4), base=base)
    assert store.summaries() == []
    base = store.save(snapshot("old", "q1", "a1"), turn(2)).revision
    store.rename("old", "new")
    saved = store.save(snapshot("old", "q1", "a1", "q2", "a2"), turn(4), base=base)
    assert saved.name == "new" and [s.name for s in store.summaries()] == ["new"]
    assert len(store.get("new").messages) == 5


def test_if_current_runs_only_at_the_revision_it_was_given(tmp_path):
    store = SessionStore.open(tmp_path)
    first = store.save(snapshot("s", "q1", "a1")).revision
    ran = []
    assert store.if_current(first, lambda: ran.append(1)) and ran == [1]
    store.save(snapshot("s", "q1", "a1", "q2", "a2"), base=first)
    assert not store.if_current(first, lambda: ran.append(2)) and ran == [1]


@pytest.mark.parametrize("name", ["work", "Projet été 2", "a.b_c-d", "x+y@z=1", "7"])
def test_good_names(name):
    assert validate_name(name) == name


@pytest.mark.parametrize(("name", "why"), [
    ("", "empty"), ("../etc", "path separators"), ("a/b", "path separators"), ("a\\b", "path separators"),
    (".hidden", "start with a letter"), ("-rf", "start with a letter"), ("a\nb", "start with a letter"),
    ("a\0b", "start with a letter"), (" pad", "start with a letter"), ("pad ", "start with a letter"),
    ("x" * 65, "longer than 64"), ("a:b", "start with a letter"), ("..", "start with a letter"),
])
def test_unsafe_names(name, why):
    with pytest.raises(SessionError, match=why):
        validate_name(name)


def test_atomic_write_and_temp_cleanup(tmp_path):
    folder = tmp_path / "states"  # a folder of its own: isolated_env puts HOME in tmp_path
    folder.mkdir()
    target = folder / "s.kvstate"
    atomic_write(target, [b"old"])
    dead = folder / f".s.kvstate.{2**22 + 12345}.abcd.tmp"  # a pid that can't be running
    dead.write_bytes(b"half")
    alive = temp_path(target)  # ours
    alive.write_bytes(b"writing")

    class Boom(Exception):
        pass

    def chunks():
        yield b"new"
        raise Boom

    with pytest.raises(Boom):
        atomic_write(target, chunks())
    assert target.read_bytes() == b"old"
    assert clean_temp_files(folder) == 1
    assert sorted(p.name for p in folder.iterdir()) == sorted([target.name, alive.name])


def test_lru_eviction_keeps_the_recently_used(tmp_path):
    folder = tmp_path / "states"  # a folder of its own: isolated_env puts HOME in tmp_path
    folder.mkdir()
    for i, name in enumerate("abc"):
        path = folder / f"{name}.kvstate"
        path.write_bytes(b"x" * 100)
        os.utime(path, (1000 + i, 1000 + i))
    os.utime(folder / "a.kvstate", (2000, 2000))  # a was used last
    (folder / "notes.txt").write_bytes(b"y" * 1000)
    evicted = evict_lru(folder, ".kvstate", 200)
    assert [p.name for p in evicted] == ["b.kvstate"]
    assert sorted(p.name for p in folder.iterdir()) == ["a.kvstate", "c.kvstate", "notes.txt"]
