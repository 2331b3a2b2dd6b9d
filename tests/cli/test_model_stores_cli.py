"""`chatapp models list` and `ask --model NAME` over other tools' stores, built from the real
default model: found, chatted with offline, and left byte for byte as they were."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.engine.models.stores import HF_NAME, LMSTUDIO_NAME, OLLAMA_NAME, build, snapshot

ASK = ("--json", "--temperature", "0", "--max-tokens", "6", "--ctx", "512", "--threads", "1")


@pytest.fixture
def run_with_stores(tmp_path, isolated_dirs, default_model_path):
    stores = build(tmp_path / "stores", default_model_path)
    exe = Path(sys.executable).with_name("chatapp")
    env = {**os.environ, **isolated_dirs, **stores.env(), "HF_HUB_OFFLINE": "1", "COLUMNS": "200"}

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(exe), *args], capture_output=True, text=True, env=env, timeout=300)

    return run, tmp_path / "stores"


def test_list_finds_every_store_and_ask_chats_with_each_leaving_them_unchanged(run_with_stores):
    run, root = run_with_stores
    before = snapshot(root)
    listed = run("models", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    rows = {row["name"]: row for row in json.loads(listed.stdout)}
    for name, source in ((HF_NAME, "huggingface"), (OLLAMA_NAME, "ollama"), (LMSTUDIO_NAME, "lmstudio")):
        row = rows[name]
        assert row["source"] == source and row["quant"] == "Q4_1" and row["n_params"] == 134_515_008
        assert row["fits"] is True and row["problem"] is None and Path(row["path"]).is_file()
        assert set(row) == {"name", "source", "path", "quant", "size_bytes", "n_params", "fits", "problem", "base"}
        assert row["base"] is None  # the default model's copies keep its chat template
    replies = []
    for name in (HF_NAME, OLLAMA_NAME, LMSTUDIO_NAME):
        out = run("ask", "--model", name, "Name a colour.", *ASK)
        assert out.returncode == 0, out.stderr
        [record] = [json.loads(line) for line in out.stdout.splitlines()]
        replies.append(record["reply"])
    assert replies[0] and replies.count(replies[0]) == 3  # one file behind three names: one greedy reply
    table = run("models", "list")
    assert table.returncode == 0 and all(title in table.stdout for title in
                                         ("Hugging Face cache", "Ollama", "LM Studio"))
    assert snapshot(root) == before


def test_a_name_that_points_nowhere_is_one_line_exit_2(run_with_stores):
    run, _ = run_with_stores
    for name in ("hf:nobody/nothing", "ollama:nothing", "lmstudio:a/b", "ollama:../../x"):
        out = run("ask", "--model", name, "hi", *ASK)
        assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1, out.stderr
        assert out.stderr.startswith("chatapp: Model: ") and "Traceback" not in out.stderr


def test_a_model_is_named_as_its_store_names_it_and_found_by_its_ollama_name(run_with_stores):
    """--json names the model as the user can type it back (not the Ollama blob, not the HF file
    name); `ollama run`'s name finds the Ollama model; a near miss says what was meant."""
    run, _ = run_with_stores
    for spec, shown in ((OLLAMA_NAME, OLLAMA_NAME), ("ollama:smollm2:135m", OLLAMA_NAME),
                        (f"hf:{HF_NAME.removeprefix('hf:').rsplit(':', 1)[0]}", HF_NAME),
                        (LMSTUDIO_NAME, LMSTUDIO_NAME), ("smollm2:135m", OLLAMA_NAME)):
        out = run("ask", "--model", spec, "Hi.", *ASK)
        assert out.returncode == 0, out.stderr
        [record] = [json.loads(line) for line in out.stdout.splitlines()]
        assert record["model"] == shown, spec
    saved = run("ask", "--model", "smollm2:135m", "--session", "kept", "Hi.", *ASK)
    assert saved.returncode == 0, saved.stderr
    listed = run("sessions", "list", "--json")
    sessions = json.loads(listed.stdout)["sessions"]
    assert [s["model"] for s in sessions if s["name"] == "kept"] == [OLLAMA_NAME], listed.stdout
    exported = run("sessions", "export", "kept", "--format", "json")
    assert json.loads(exported.stdout)["model"]["name"] == OLLAMA_NAME, exported.stdout[:300]
    missed = run("ask", "--model", "smollm2", "hi", *ASK)
    assert missed.returncode == 2 and len(missed.stderr.strip().splitlines()) == 1, missed.stderr
    assert f"did you mean {OLLAMA_NAME}?" in missed.stderr
    helped = run("ask", "--help")
    assert all(form in helped.stdout for form in ("hf:ORG/REPO", "ollama:NAME", "lmstudio:PUBLISHER/REPO"))


SECRET = "qzx7:$6$SECRETHASH:19000:0:99999:7:::\n"
"""A line as /etc/shadow holds them (its user named so that no path here contains it)."""


def test_a_store_file_that_links_to_another_file_is_named_never_shown(run_with_stores, tmp_path):
    """Debatable point: a symlink in a store to /etc/shadow had its first bytes printed in a note.
    Notes and refusals name the file and the problem; no byte of a file chatapp did not write
    (before its first four bytes say it is a GGUF) is echoed."""
    run, root = run_with_stores
    shadow = tmp_path / "shadow"
    shadow.write_text(SECRET)
    repo = root / "lmstudio-home" / "models" / "evil" / "repo"
    repo.mkdir(parents=True)
    (repo / "m-Q4_1.gguf").symlink_to(shadow)
    hub_repo = root / "hub" / "models--evil--repo"
    (hub_repo / "snapshots" / ("c" * 40)).mkdir(parents=True)
    (hub_repo / "refs").mkdir()
    (hub_repo / "refs" / "main").symlink_to(shadow)
    said = [run("models", "list", "--json"), run("ask", "--model", "lmstudio:evil/repo", "hi", *ASK),
            run("models", "info", "lmstudio:evil/repo")]
    for out in said:
        assert "Traceback" not in out.stderr and "qzx7" not in out.stderr and "SECRET" not in out.stderr, out.stderr
        assert "qzx7" not in out.stdout and "SECRET" not in out.stdout
    notes = said[0].stderr
    assert "lmstudio:evil/repo: not a readable GGUF file (not a GGUF file (its first 4 bytes are not GGUF's " \
           "magic))" in notes
    assert "models--evil--repo: a ref in it names a commit it holds no snapshot of" in notes
    assert said[1].returncode == 2 and f"{repo / 'm-Q4_1.gguf'}: not a GGUF file" in said[1].stderr
