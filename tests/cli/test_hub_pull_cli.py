"""`chatapp models pull hf:ORG/REPO[:QUANT]` against a hub served on 127.0.0.1 (HF_ENDPOINT)
from the real default model: the pull lands in the shared hub cache, is found and chatted
with offline, resumes a dropped connection and an interrupted pull, and refuses a wrong
checksum, a gated repo, an unknown repo or quant, a repo with no GGUF and a full disk in one
line each, listing nothing half-written."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.engine.models.fake_hub import FakeHub, HubRepo

REPO = "bartowski/SmolLM2-135M-Instruct-GGUF"
ASK = ("--json", "--temperature", "0", "--max-tokens", "4", "--ctx", "512", "--threads", "1")


@pytest.fixture
def hub(default_model_path):
    with FakeHub() as served:
        served.repos[REPO] = HubRepo({"SmolLM2-135M-Instruct-Q4_1.gguf": default_model_path,
                                      "SmolLM2-135M-Instruct-Q8_0.gguf": default_model_path})
        yield served


@pytest.fixture
def chatapp_run(tmp_path, isolated_dirs, hub):
    exe = Path(sys.executable).with_name("chatapp")
    cache = tmp_path / "hub-cache"
    env = {**os.environ, **isolated_dirs, "HOME": str(tmp_path), "HF_ENDPOINT": hub.url,
           "HF_HUB_CACHE": str(cache), "HF_HUB_DISABLE_TELEMETRY": "1", "HF_HUB_DISABLE_XET": "1", "COLUMNS": "200"}
    env.pop("HF_TOKEN", None)

    def run(*args: str, **extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(exe), *args], capture_output=True, text=True, env={**env, **extra}, timeout=300)

    run.env, run.cache = env, cache
    return run


def listed(run) -> dict[str, dict]:
    out = run("models", "list", "--json")
    assert out.returncode == 0, out.stderr
    return {row["name"]: row for row in json.loads(out.stdout) if row["source"] == "huggingface"}


def test_a_pull_lands_in_the_shared_cache_and_chats_offline(chatapp_run, default_model_path):
    pulled = chatapp_run("models", "pull", f"hf:{REPO}:Q4_1")
    assert pulled.returncode == 0, pulled.stderr
    path = Path(pulled.stdout.strip())
    assert path.is_relative_to(chatapp_run.cache) and path.read_bytes() == default_model_path.read_bytes()
    assert f"pulled hf:{REPO}:Q4_1 into {chatapp_run.cache} (sha256 verified)" in pulled.stderr
    assert list(listed(chatapp_run)) == [f"hf:{REPO}:Q4_1"]
    out = chatapp_run("ask", "--model", f"hf:{REPO}:Q4_1", "Name a colour.", *ASK, HF_HUB_OFFLINE="1")
    assert out.returncode == 0, out.stderr
    again = chatapp_run("models", "pull", "--if-missing", f"hf:{REPO}:Q4_1")
    assert again.returncode == 0 and "is present" in again.stderr


def test_without_a_quant_llama_cpps_rule_picks_q4_k_m_then_q8_0(chatapp_run, hub, default_model_path):
    pulled = chatapp_run("models", "pull", f"hf:{REPO}")
    assert pulled.returncode == 0, pulled.stderr
    assert Path(pulled.stdout.strip()).name == "SmolLM2-135M-Instruct-Q8_0.gguf"  # no Q4_K_M here: Q8_0
    hub.repos[REPO].files["SmolLM2-135M-Instruct-Q4_K_M.gguf"] = default_model_path
    pulled = chatapp_run("models", "pull", f"hf:{REPO}")
    assert Path(pulled.stdout.strip()).name == "SmolLM2-135M-Instruct-Q4_K_M.gguf"


def test_a_dropped_connection_is_resumed_and_checked(chatapp_run, hub):
    hub.drop_after = 10 << 20
    pulled = chatapp_run("models", "pull", f"hf:{REPO}:Q4_1")
    assert pulled.returncode == 0, pulled.stderr
    assert hub.ranges and hub.ranges[0].startswith("bytes=") and int(hub.ranges[0][6:].rstrip("-")) > 0
    assert f"hf:{REPO}:Q4_1" in listed(chatapp_run)


def test_an_interrupted_pull_lists_nothing_and_the_next_one_resumes(chatapp_run, hub):
    hub.delay = 0.02
    exe = Path(sys.executable).with_name("chatapp")
    # SIGINT as a terminal delivers it, even when this run was started in the background, where
    # the shell had it ignored (and Python installs no KeyboardInterrupt for an ignored signal).
    pulling = subprocess.Popen([str(exe), "models", "pull", f"hf:{REPO}:Q4_1"], env=chatapp_run.env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 120
    while not any(p.stat().st_size > 1 << 20 for p in chatapp_run.cache.rglob("*.incomplete")):
        assert time.monotonic() < deadline and pulling.poll() is None, "the pull never got going"
        time.sleep(0.1)
    pulling.send_signal(signal.SIGINT)
    _, err = pulling.communicate(timeout=60)
    assert pulling.returncode == 130 and "Traceback" not in err, err
    assert listed(chatapp_run) == {}
    hub.delay = 0.0
    resumed = chatapp_run("models", "pull", f"hf:{REPO}:Q4_1")
    assert resumed.returncode == 0, resumed.stderr
    assert hub.ranges, "the second pull started over instead of resuming"
    assert f"hf:{REPO}:Q4_1" in listed(chatapp_run)


def one_line(out: subprocess.CompletedProcess[str], code: int, needle: str) -> None:
    """One line says what went wrong (a progress bar may stand above it)."""
    assert out.returncode == code, out.stderr
    said = [line for line in out.stderr.splitlines() if line.startswith("chatapp: ")]
    assert len(said) == 1 and needle in said[0] and "Traceback" not in out.stderr, out.stderr


def test_a_wrong_checksum_is_refused_and_removed(chatapp_run, hub):
    hub.repos[REPO].wrong_sha = True
    one_line(chatapp_run("models", "pull", f"hf:{REPO}:Q4_1"), 2, "is not the hub's 000000000000")
    assert listed(chatapp_run) == {} and not list(chatapp_run.cache.rglob("blobs/*"))


def test_the_hubs_refusals_are_one_line_each(chatapp_run, hub, tmp_path):
    hub.repos["org/gated"] = HubRepo({"m-Q4_1.gguf": hub.repos[REPO].files["SmolLM2-135M-Instruct-Q4_1.gguf"]},
                                     gated=True)
    hub.repos["org/nogguf"] = HubRepo({})
    one_line(chatapp_run("models", "pull", "hf:org/gated"), 2, "is gated or private")
    one_line(chatapp_run("models", "pull", "hf:org/missing"), 2, "no such repository")
    one_line(chatapp_run("models", "pull", f"hf:{REPO}:Q2_K"), 2, "has no Q2_K GGUF (it has Q4_1, Q8_0)")
    one_line(chatapp_run("models", "pull", "hf:org/nogguf"), 2, "holds no GGUF file")
    one_line(chatapp_run("models", "pull", "hf:not a name"), 2, "is not a Hugging Face model name")
    one_line(chatapp_run("models", "pull", f"hf:{REPO}:Q4_1", HF_HUB_OFFLINE="1"), 2, "HF_HUB_OFFLINE")
    assert listed(chatapp_run) == {}


def test_a_full_disk_is_one_line_exit_1_and_lists_nothing(chatapp_run, tmp_path):
    tiny = tmp_path / "tiny"
    tiny.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(tiny)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        out = chatapp_run("models", "pull", f"hf:{REPO}:Q4_1", HF_HUB_CACHE=str(tiny))
        one_line(out, 1, "the disk is full")
        assert not listed(lambda *a: chatapp_run(*a, HF_HUB_CACHE=str(tiny)))
    finally:
        subprocess.run(["umount", str(tiny)], check=False)


def test_a_split_model_is_pulled_whole(chatapp_run, hub, tmp_path, default_model_path):
    second = tmp_path / "part2.bin"
    second.write_bytes(b"GGUF" + bytes(4096))
    hub.repos["org/split"] = HubRepo({"big-Q4_1-00001-of-00002.gguf": default_model_path,
                                      "big-Q4_1-00002-of-00002.gguf": second})
    pulled = chatapp_run("models", "pull", "hf:org/split:Q4_1")
    assert pulled.returncode == 0, pulled.stderr
    first = Path(pulled.stdout.strip())
    assert first.name == "big-Q4_1-00001-of-00002.gguf"
    assert (first.parent / "big-Q4_1-00002-of-00002.gguf").read_bytes() == second.read_bytes()
    [row] = [row for name, row in listed(chatapp_run).items() if name.startswith("hf:org/split")]
    assert row["size_bytes"] == default_model_path.stat().st_size + second.stat().st_size
