"""Private by default: folders 0700 and files 0600 whatever the umask, old installs tightened,
files of another user refused."""

from __future__ import annotations

import os
import sqlite3
import stat

import pytest

from chatapp import paths, private
from chatapp.engine.events import Message
from chatapp.engine.filecache import FileCache
from chatapp.engine.sessions.files import atomic_write
from chatapp.engine.sessions.store import ModelIdentity, SessionStore, Snapshot
from chatapp.errors import SessionError
from tests.private_helpers import OTHER_UID, give_away, not_private, umask

UMASKS = [0o000, 0o022]


def snapshot(text: str) -> Snapshot:
    return Snapshot("s", ModelIdentity("m", "/m.gguf", "ab" * 32, "Q4_1"),
                    [Message("system", "Be brief."), Message("user", text)], 1, 10)


@pytest.mark.parametrize("mask", UMASKS)
def test_folders_and_files_are_created_private(tmp_path, mask):
    with umask(mask):
        folder = private.make_private_dir(tmp_path / "a" / "b" / "c")
        with private.open_private(folder / "f") as out:
            out.write(b"x")
        atomic_write(folder / "g", [b"y"])
        private.precreate_private(folder / "h")
        FileCache("facts", tmp_path / "cache").put(folder / "f", 1)
    assert not_private(tmp_path / "a", tmp_path / "cache") == []


def test_an_existing_folder_is_left_as_it_is(tmp_path):
    (tmp_path / "mine").mkdir(mode=0o755)
    os.chmod(tmp_path / "mine", 0o755)
    private.make_private_dir(tmp_path / "mine")
    assert stat.S_IMODE((tmp_path / "mine").stat().st_mode) == 0o755


def test_a_planted_symlink_is_never_written_through(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("keep")
    (tmp_path / "link").symlink_to(victim)
    with pytest.raises(FileExistsError):
        private.open_private(tmp_path / "link")
    atomic_write(tmp_path / "link", [b"new"])  # replaces the link itself
    assert victim.read_text() == "keep" and not (tmp_path / "link").is_symlink()


@pytest.mark.parametrize("mask", UMASKS)
def test_the_session_database_and_its_wal_and_shm_are_private(tmp_path, mask):
    with umask(mask):
        store = SessionStore.open(tmp_path / "sessions")
        reader = sqlite3.connect(store.path)  # an open connection keeps -wal and -shm in place
        try:
            reader.execute("SELECT COUNT(*) FROM sessions").fetchone()
            store.save(snapshot("hello"))
            names = {p.name for p in (tmp_path / "sessions").iterdir()}
            assert {"sessions.db", "sessions.db-wal", "sessions.db-shm"} <= names
            assert not_private(tmp_path / "sessions") == []
        finally:
            reader.close()


def test_a_database_of_another_user_is_refused_in_one_line(tmp_path, monkeypatch):
    store = SessionStore.open(tmp_path / "sessions")
    store.save(snapshot("a secret"))
    give_away(store.path, monkeypatch)
    for create in (True, False):
        with pytest.raises(SessionError, match=r"is not opened: it belongs to another user \(uid \d+\)$") as caught:
            SessionStore.open(tmp_path / "sessions", create=create)
        assert "\n" not in caught.value.one_line()


# --- tightening an install from before --------------------------------------------------------
def old_install(outside) -> None:
    """What chatapp left before this change, with umask 022: 0755 folders, 0644 files."""
    with umask(0o022):
        states = paths.sessions_dir() / "states"
        states.mkdir(parents=True)
        SessionStore.open(paths.sessions_dir()).save(snapshot("an old conversation"))
        (states / "k.kvstate").write_bytes(b"CHATKV" + bytes(100))
        paths.models_dir().mkdir(parents=True)
        (paths.models_dir() / "m.gguf").write_bytes(b"GGUF")
        (paths.models_dir() / "elsewhere.gguf").symlink_to(outside)
        tools = paths.cache_dir() / "llama-tools"
        tools.mkdir(parents=True)
        (tools / "llama-server").write_bytes(b"\x7fELF")
        (paths.cache_dir() / "sha256.json").write_text("{}")
    os.chmod(tools / "llama-server", 0o755)
    for path in [paths.data_dir(), paths.cache_dir(), *paths.data_dir().rglob("*"), *paths.cache_dir().rglob("*")]:
        if not path.is_symlink():
            os.chmod(path, 0o755 if path.is_dir() or path.name == "llama-server" else 0o644)


@pytest.mark.unmeasured_machine  # a first run: the machine is not measured yet
def test_an_old_install_is_tightened_once_with_one_line(tmp_path):
    outside = tmp_path / "not-chatapps.gguf"
    outside.write_bytes(b"GGUF")
    old_install(outside)
    assert len(not_private(paths.data_dir(), paths.cache_dir())) == 11
    result = private.tighten_install()
    assert not_private(paths.data_dir(), paths.cache_dir()) == ["700 " + str(paths.cache_dir() / "llama-tools" /
                                                                             "llama-server")]
    assert (result.files, result.folders) == (5, 6)
    assert result.notice() == (f"tightened permissions on 5 files and 6 folders in {paths.data_dir()}, "
                               f"{paths.cache_dir()} (other users could read them)")
    assert stat.S_IMODE(outside.stat().st_mode) == 0o644  # behind a symlink: not chatapp's to change
    assert private.tighten_install().notice() is None


def test_a_private_install_costs_no_walk(tmp_path, monkeypatch):
    outside = tmp_path / "x"
    outside.write_bytes(b"")
    old_install(outside)
    private.tighten_install()
    monkeypatch.setattr(private, "tighten_tree", lambda *a: pytest.fail("walked a private install"))
    assert private.tighten_install().notice() is None


def test_one_loose_state_file_in_a_private_install_is_found(tmp_path):
    """An old chatapp's state file copied into a new install: three folders down, still tightened."""
    states = paths.sessions_dir() / "states"
    private.make_private_dir(states)
    private.make_private_dir(paths.cache_dir())
    loose = states / "old.kvstate"
    loose.write_bytes(b"x")
    os.chmod(loose, 0o644)
    result = private.tighten_install()
    assert (result.files, result.folders) == (1, 0)
    assert stat.S_IMODE(loose.stat().st_mode) == 0o600


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another user needs root")
def test_files_of_another_user_are_left_alone(tmp_path):
    paths.sessions_dir().mkdir(parents=True)
    theirs = paths.sessions_dir() / "theirs.txt"
    theirs.write_text("x")
    os.chmod(theirs, 0o644)
    os.chown(theirs, OTHER_UID, OTHER_UID)
    os.chmod(paths.data_dir(), 0o755)
    private.tighten_install()
    assert stat.S_IMODE(theirs.stat().st_mode) == 0o644
    assert stat.S_IMODE(paths.data_dir().stat().st_mode) == 0o700
