"""`chatapp models info` on a vision model: the projector beside the GGUF or named by --mmproj."""

from __future__ import annotations

import json

import pytest

from tests.engine.local.vision import build_projector


@pytest.fixture(autouse=True)
def wide_terminal(monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")


def test_info_finds_the_projector_beside_the_model(invoke, default_model_path, tmp_path):
    model = tmp_path / "vision" / default_model_path.name
    model.parent.mkdir()
    model.symlink_to(default_model_path)
    assert "sees images" not in invoke("models", "info", str(model)).output
    build_projector(model.parent / "mmproj-SmolLM2-135M-Instruct-f16.gguf")
    result = invoke("models", "info", str(model))
    assert result.exit_code == 0, result.output
    assert "sees images through mmproj-SmolLM2-135M-Instruct-f16.gguf (projector mlp, 16 tokens per image)" \
        in result.output
    facts = json.loads(invoke("models", "info", str(model), "--json").output)
    assert facts["projector"]["image_token_budget"] == 16 and facts["projector"]["n_embd"] == facts["n_embd"]


def test_info_says_a_projector_belongs_to_another_model(invoke, tmp_path):
    other = build_projector(tmp_path / "mmproj-other.gguf", n_embd=512)
    result = invoke("models", "info", "--mmproj", str(other))
    assert result.exit_code == 0, result.output
    assert "the projector makes 512-wide embeddings, this model takes 576" in result.output


def test_info_with_a_missing_projector_is_one_line(invoke, tmp_path):
    result = invoke("models", "info", "--mmproj", str(tmp_path / "none.gguf"))
    assert result.exit_code != 0
    assert "no projector file at" in result.output and "Traceback" not in result.output
