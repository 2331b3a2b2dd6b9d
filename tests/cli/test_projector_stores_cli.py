"""A vision model's projector found where each tool keeps it (issue 55): Ollama's projector
layer, the mmproj beside the GGUF in LM Studio's folder, and the top of a Hugging Face snapshot
whose quants live in subfolders; built from the real default model and a synthetic projector."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.engine.local.vision import build_projector, picture
from tests.engine.models.stores import HF_REPO, LMSTUDIO_NAME, OLLAMA_NAME, hf_repo, ollama_model, place

HF_NAME = f"hf:{HF_REPO}:Q4_1"


@pytest.fixture
def vision_stores(tmp_path, isolated_dirs, default_model_path):
    projector = build_projector(tmp_path / "mmproj-SmolLM2-135M-Instruct-f16.gguf")
    home, hub, ollama, lmstudio = (tmp_path / name for name in ("home", "hub", "ollama", "lmstudio-home"))
    home.mkdir(exist_ok=True)
    ollama_model(ollama, default_model_path, projector=projector)
    repo = hf_repo(hub, default_model_path, files=("Q4_1/SmolLM2-135M-Instruct-Q4_1.gguf",))
    place(projector, repo / "snapshots" / next(os.scandir(repo / "snapshots")).name / projector.name)
    folder = lmstudio / "models" / "bartowski" / "SmolLM2-135M-Instruct-GGUF"
    place(default_model_path, folder / "SmolLM2-135M-Instruct-Q4_1.gguf")
    place(projector, folder / projector.name)
    (home / ".lmstudio-home-pointer").write_text(str(lmstudio))
    env = {**os.environ, **isolated_dirs, "HOME": str(home), "HF_HUB_CACHE": str(hub), "OLLAMA_MODELS": str(ollama),
           "HF_HUB_OFFLINE": "1", "COLUMNS": "200"}
    exe = Path(sys.executable).with_name("chatapp")

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(exe), *args], capture_output=True, text=True, env=env, timeout=300)

    return run


@pytest.mark.parametrize("name", [OLLAMA_NAME, LMSTUDIO_NAME, HF_NAME])
def test_each_store_gives_its_vision_model_the_projector_it_keeps(vision_stores, name):
    out = vision_stores("models", "info", name, "--json")
    assert out.returncode == 0, out.stderr
    projector = json.loads(out.stdout)["projector"]
    assert projector is not None, f"{name}: no projector found"
    assert projector["n_embd"] == 576 and projector["image_token_budget"] == 16
    if name == OLLAMA_NAME:  # the manifest's projector layer: a blob of its own
        assert Path(projector["path"]).name.startswith("sha256-")


def test_an_ollama_vision_model_reads_an_image_through_its_projector_layer(vision_stores, tmp_path):
    (tmp_path / "boat.png").write_bytes(picture(5))
    out = vision_stores("ask", "--model", OLLAMA_NAME, "--image", str(tmp_path / "boat.png"), "What is it?",
                        "--json", "--threads", "1", "-n", "2", "--temperature", "0")
    assert out.returncode == 0, out.stderr
    record = json.loads(out.stdout.splitlines()[-1])
    assert record["image_encodes"] == 1 and record["image_tokens"] == 16


def test_an_ollama_model_without_a_projector_layer_reads_text_only(tmp_path, isolated_dirs, default_model_path):
    ollama_model(tmp_path / "ollama", default_model_path)
    env = {**os.environ, **isolated_dirs, "OLLAMA_MODELS": str(tmp_path / "ollama"), "COLUMNS": "200"}
    out = subprocess.run([str(Path(sys.executable).with_name("chatapp")), "models", "info", OLLAMA_NAME, "--json"],
                         capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["projector"] is None
