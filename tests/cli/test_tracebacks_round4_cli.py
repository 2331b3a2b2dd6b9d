"""Inputs that ended in a traceback, through the real chatapp: an export of a conversation
deeper than Python's json module nests, model names no file name can hold or whose ~USER is
nobody, and drafting and machine caches edited into types chatapp never writes or nested far
too deep. Each is one line, or nothing at all where a cache is only a shortcut."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from chatapp import paths
from chatapp.engine.events import Message
from chatapp.engine.local.drafting import POLICY_CACHE
from chatapp.engine.local.exact_batches import CACHE
from chatapp.engine.sessions.store import ModelIdentity, SessionStore, Snapshot
from tests.cli.one_line import one_line

EXE = Path(sys.executable).with_name("chatapp")


@pytest.fixture
def run(isolated_dirs, tmp_path):
    store = tmp_path / "ollama"
    (store / "manifests" / "registry.ollama.ai" / "library").mkdir(parents=True)  # a name is looked up in it

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, **isolated_dirs, "COLUMNS": "200", "OLLAMA_MODELS": str(store)}
        return subprocess.run([str(EXE), *args], capture_output=True, text=True, env=env, timeout=300)

    return run


# --- an export deeper than json nests -----------------------------------------------------------
def test_an_all_branches_export_of_a_long_conversation_is_flat_valid_json(run):
    turns = 600  # a nested tree failed past about 450 messages (RecursionError)
    messages = [Message("system", "Be brief.")]
    for n in range(turns):
        messages += [Message("user", f"question {n}"), Message("assistant", f"answer {n}")]
    SessionStore.open(paths.sessions_dir()).save(
        Snapshot("long", ModelIdentity("m", "/m.gguf", "ab" * 32, "Q4_1"), messages, 1, 0))
    out = run("sessions", "export", "long", "--all-branches", "--format", "json")
    assert out.returncode == 0 and out.stderr == "", out.stderr
    data = json.loads(out.stdout)
    assert data["version"] == 2
    tree = data["tree"]
    assert len(tree) == 2 * turns and [node["depth"] for node in tree] == list(range(2 * turns))
    assert all(node["parent"] == before["id"] and before["children"] == [node["id"]]
               for before, node in zip(tree, tree[1:]))
    assert tree[0]["parent"] is None and tree[-1]["content"] == f"answer {turns - 1}" and tree[-1]["active"]
    assert data["branches"] == [[node["id"] for node in tree]]
    markdown = run("sessions", "export", "long", "--all-branches")
    assert markdown.returncode == 0 and f"answer {turns - 1}" in markdown.stdout, markdown.stderr


# --- model names that are no file's --------------------------------------------------------------
ASK = ("--json", "--temperature", "0", "--max-tokens", "4", "--ctx", "512", "--threads", "1")


@pytest.mark.parametrize(("name", "expected"), [
    ("m" * 300, "chatapp: Model: the model name 'mmmm"),
    ("m" * 300 + ".gguf", "chatapp: Model: the model name 'mmmm"),
    ("ollama:" + "m" * 300, "chatapp: Model: the model name 'ollama:mmmm"),
    ("ollama:" + "m" * 300 + ":" + "t" * 300, "chatapp: Model: the model name 'ollama:mmmm"),
    ("~nouser-chatapp-test/x.gguf", "chatapp: Model: model file not found: '~nouser-chatapp-test/x.gguf' "
                                    "(this machine has no user 'nouser-chatapp-test')"),
])
def test_a_model_name_no_file_can_have_is_one_line(run, name, expected):
    out = run("ask", "--model", name, "hi", *ASK)
    line = one_line(out)
    assert out.returncode == 2 and line.startswith(expected), line
    if "~" not in name:
        assert "characters) is too long to be a file name" in line and len(line) < 300, line


def test_an_lm_studio_pointer_naming_a_users_home_that_is_not_here_is_passed_over(isolated_dirs, tmp_path):
    home = tmp_path / "pointer-home"  # a home of its own (isolated_env's is tmp_path / "home")
    home.mkdir()
    (home / ".lmstudio-home-pointer").write_text("~nouser-chatapp-test/lmstudio")
    env = {**os.environ, **isolated_dirs, "HOME": str(home), "HF_HUB_OFFLINE": "1"}
    out = subprocess.run([str(EXE), "models", "list", "--json"], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0 and "Traceback" not in out.stderr, out.stderr
    assert not any(row["source"] == "lmstudio" for row in json.loads(out.stdout))


# --- drafting and machine caches edited or nested too deep ---------------------------------------
DRAFT = ("ask", "Repeat exactly: the old lighthouse stood on a rocky point.", "--json", "--temperature", "0",
         "--max-tokens", "12", "--ctx", "512", "--threads", "1", "--draft", "ngram", "--draft-max", "2")


def strings_for_numbers(value):
    """Every number of a JSON value as a string, as a hand edit might leave it."""
    if isinstance(value, dict):
        return {k: strings_for_numbers(v) for k, v in value.items()}
    if isinstance(value, list):
        return [strings_for_numbers(v) for v in value]
    return str(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else value


def reply(out: subprocess.CompletedProcess) -> dict:
    assert out.returncode == 0 and "Traceback" not in out.stderr, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_edited_drafting_and_machine_caches_are_ignored_and_every_ask_still_answers(run, isolated_dirs):
    first = reply(run(*DRAFT))  # writes the batch check, the draft policy and the model-info caches
    cache = Path(isolated_dirs["XDG_CACHE_HOME"]) / "chatapp"
    verdicts = cache / f"{CACHE}.json"
    assert verdicts.exists(), sorted(p.name for p in cache.iterdir())
    for path in cache.glob("*.json"):  # each cached value's numbers; the file identities stay valid
        data = json.loads(path.read_text())
        for entry in data.get("entries", {}).values():
            entry["value"] = strings_for_numbers(entry["value"])
        path.write_text(json.dumps(data))
    edited = json.loads(verdicts.read_text())["entries"]
    assert any(isinstance(v, str) for entry in edited.values() for check in entry["value"].values()
               for v in check.values())  # the check's numbers are strings now, as in the report
    second = reply(run(*DRAFT))
    assert second["reply"] == first["reply"]
    deep = "[" * 200_000 + "]" * 200_000
    for name in (CACHE, POLICY_CACHE, "model_info", "sha256", "decode_threads", "memory_bandwidth"):
        (cache / f"{name}.json").write_text(deep)
    third = reply(run(*DRAFT))
    assert third["reply"] == first["reply"]
    assert json.loads(verdicts.read_text())["format"] == 1  # written again, whole
