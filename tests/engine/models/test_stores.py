"""Discovery in other tools' stores, built from the real default model: each store is found,
named, resolved, left unchanged, and a damaged one costs one line, not the listing."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from chatapp.engine.filecache import hash_file
from chatapp.engine.models import hub_cache, lmstudio_store, ollama_store
from chatapp.engine.models.discovery import discover
from chatapp.engine.models.resolve import resolve_model, resolve_named
from chatapp.engine.models.sources import group_gguf_files, quant_of
from chatapp.errors import ModelError
from tests.engine.models.stores import (
    HF_NAME, HF_REPO, LMSTUDIO_NAME, OLLAMA_NAME, hf_repo, ollama_model, snapshot, use_stores)


@pytest.fixture
def stores(tmp_path, monkeypatch, default_model_path):
    return use_stores(tmp_path, default_model_path, monkeypatch)


def by_name(found):
    return {model.name: model for model in found.models}


def test_quant_and_split_rules():
    assert quant_of("SmolLM2-135M-Instruct-Q4_K_M.gguf") == "Q4_K_M"
    assert quant_of("model.q8_0.gguf") == "Q8_0"
    assert quant_of("x-IQ4_XS-00001-of-00003.gguf") == "IQ4_XS"
    assert quant_of("gemma-3-270m-bf16.gguf") == "BF16"
    assert quant_of("plain.gguf") is None
    files = [Path(f"/m/big-Q4_K_M-0000{i}-of-00003.gguf") for i in (1, 2, 3)] + [
        Path("/m/mmproj-big-f16.gguf"), Path("/m/small-Q8_0.gguf"), Path("/m/half-00002-of-00002.gguf")]
    groups = {g.first.name: g for g in group_gguf_files(files)}
    assert set(groups) == {"big-Q4_K_M-00001-of-00003.gguf", "small-Q8_0.gguf", "half-00002-of-00002.gguf"}
    assert len(groups["big-Q4_K_M-00001-of-00003.gguf"].parts) == 3 and groups["small-Q8_0.gguf"].problem is None
    assert groups["half-00002-of-00002.gguf"].problem == "split model missing part 1 of 2"


def test_every_store_is_found_named_and_resolved_and_left_unchanged(stores, tmp_path, default_model_path):
    before = snapshot(tmp_path)
    found = by_name(discover())
    for name, source in ((HF_NAME, "huggingface"), (OLLAMA_NAME, "ollama"), (LMSTUDIO_NAME, "lmstudio")):
        model = found[name]
        assert model.source == source and model.problem is None
        assert model.size_bytes == default_model_path.stat().st_size and model.quant == "Q4_1"
        assert os.path.samefile(model.path, default_model_path) or model.path.read_bytes()[:4] == b"GGUF"
        assert resolve_model(name) == Path(os.path.abspath(model.path))
    assert resolve_model(f"hf:{HF_REPO}") == resolve_model(HF_NAME)  # no quant: llama.cpp's rule picks it
    assert resolve_model("ollama:smollm2:135m") == resolve_model("ollama:library/smollm2:135m")
    assert snapshot(tmp_path) == before


def test_a_store_model_is_named_as_the_store_lists_it(stores, default_model_path, tmp_path, monkeypatch):
    """The name shown for a model is the one the user can type back: the listed name, whatever
    form of it was given (no quant, no tag, the default namespace, no ollama: prefix)."""
    ollama_model(stores.ollama, default_model_path, ("registry.ollama.ai", "library", "smollm2", "latest"))
    for spec, shown in ((HF_NAME, HF_NAME), (f"hf:{HF_REPO}", HF_NAME), (OLLAMA_NAME, OLLAMA_NAME),
                        ("ollama:library/smollm2:135m", OLLAMA_NAME), ("smollm2:135m", OLLAMA_NAME),
                        ("ollama:smollm2", "ollama:smollm2:latest"), (LMSTUDIO_NAME, LMSTUDIO_NAME)):
        path, name = resolve_named(spec)
        assert name == shown and path == resolve_model(shown), spec
    assert resolve_named(str(default_model_path)) == (default_model_path.resolve(), None)  # a path: as before
    here = tmp_path / "smollm2:135m"  # a file of that name here wins over the Ollama model
    here.symlink_to(default_model_path)
    monkeypatch.chdir(tmp_path)
    assert resolve_named("smollm2:135m")[1] is None


def test_a_bare_name_close_to_an_ollama_model_says_which_it_meant(stores):
    with pytest.raises(ModelError, match=f"did you mean {OLLAMA_NAME}\\?$"):
        resolve_model("smollm2")


@pytest.mark.parametrize("spec, needle", [
    ("hf:nobody/nothing", "not in the Hugging Face cache"),
    (f"{HF_NAME[:-5]}:Q8_0", "has no Q8_0 GGUF in the cache (it has Q4_1)"),
    ("hf:../../etc", "not a Hugging Face model name"),
    ("hf:a/b/c", "not a Hugging Face model name"),
    ("ollama:smollm2:7b", "is not in Ollama's store"),
    ("ollama:../../../etc/passwd", "not an Ollama model name"),
    ("lmstudio:bartowski/..", "not an LM Studio model name"),
    ("lmstudio:nobody/nothing", "not in LM Studio's models folder"),
])
def test_a_name_that_points_nowhere_is_one_line(stores, spec, needle):
    with pytest.raises(ModelError) as caught:
        resolve_model(spec)
    assert needle in str(caught.value) and "\n" not in str(caught.value)


def test_ollama_without_a_namespace_default_tag_and_others(stores, default_model_path):
    ollama_model(stores.ollama, default_model_path, ("registry.ollama.ai", "library", "smollm2", "latest"))
    ollama_model(stores.ollama, default_model_path, ("registry.ollama.ai", "someone", "tiny", "q4"))
    ollama_model(stores.ollama, default_model_path, ("hf.co", "org", "repo", "Q4_1"))
    found = by_name(discover())
    assert {"ollama:smollm2:latest", "ollama:someone/tiny:q4", "ollama:hf.co/org/repo:Q4_1"} <= set(found)
    assert resolve_model("ollama:smollm2") == resolve_model("ollama:smollm2:latest")
    assert resolve_model("ollama:someone/tiny:q4") and resolve_model("ollama:hf.co/org/repo:Q4_1")


def test_hostile_stores_cost_one_line_each_and_the_rest_is_listed(stores, default_model_path, tmp_path):
    store = stores.ollama
    missing = ollama_model(store, default_model_path, ("registry.ollama.ai", "library", "gone", "latest"),
                           digest="0" * 64)
    (store / "blobs" / f"sha256-{'0' * 64}").unlink()
    text_blob = store / "blobs" / f"sha256-{'1' * 64}"
    manifest = json.loads(missing.read_text())
    manifest["layers"][0]["digest"] = f"sha256:{'1' * 64}"
    notgguf = store / "manifests" / "registry.ollama.ai" / "library" / "text" / "latest"
    notgguf.parent.mkdir(parents=True)
    notgguf.write_text(json.dumps(manifest))
    text_blob.write_text("not a model")
    huge = store / "manifests" / "registry.ollama.ai" / "library" / "huge" / "latest"
    huge.parent.mkdir(parents=True)
    huge.write_bytes(b" " * (10 << 20))
    adapter = store / "manifests" / "registry.ollama.ai" / "library" / "adapter" / "latest"
    adapter.parent.mkdir(parents=True)
    adapter.write_text(json.dumps({"layers": [{"mediaType": "application/vnd.ollama.image.adapter"}]}))
    (store / "manifests" / "registry.ollama.ai" / "library" / "afile").write_text("a file where a folder goes")
    loop = stores.hub / "models--loop--repo" / "snapshots" / "c0ffee"
    loop.mkdir(parents=True)
    (loop / "a.gguf").symlink_to(loop / "b.gguf")
    (loop / "b.gguf").symlink_to(loop / "a.gguf")
    (stores.lmstudio / "models" / "x" / "y").mkdir(parents=True)
    (stores.lmstudio / "models" / "x" / "y" / "broken.gguf").mkdir()  # a folder named like a model

    found = discover()
    named = by_name(found)
    assert {HF_NAME, OLLAMA_NAME, LMSTUDIO_NAME} <= set(named)  # the good ones are all still there
    assert named["ollama:gone:latest"].problem.startswith("its model blob sha256-000")
    assert named["ollama:text:latest"].problem == f"its model blob sha256-{'1' * 64} is not a GGUF file"
    assert named["ollama:huge:latest"].problem == "the manifest is over 1 MiB: not an Ollama manifest"
    assert named["ollama:adapter:latest"].problem.startswith("no GGUF layer")
    assert not any(name.startswith("hf:loop/") for name in named)
    assert any("models--loop--repo" in problem for problem in found.problems)  # the loop, in one line
    for model in found.models:
        assert model.path is None or model.problem is None
    for problem in found.problems:
        assert "\n" not in problem


def test_a_thousand_models_are_found_without_reading_a_header(stores, default_model_path, monkeypatch):
    digest = hash_file(default_model_path)  # once: hashing it for each of the 600 took most of a minute
    for i in range(300):
        hf_repo(stores.hub, default_model_path, repo_id=f"org/repo{i}", files=(f"m{i}-Q4_K_M.gguf",), digest=digest)
    for i in range(300):
        ollama_model(stores.ollama, default_model_path, ("registry.ollama.ai", "library", f"m{i}", "latest"),
                     digest=digest)
    for i in range(400):
        path = stores.lmstudio / "models" / "pub" / f"repo{i}" / f"m{i}-Q8_0.gguf"
        path.parent.mkdir(parents=True)
        os.link(default_model_path, path) if os.stat(default_model_path).st_dev == os.stat(path.parent).st_dev \
            else path.symlink_to(default_model_path)
    from chatapp.engine.models import gguf_header

    def no_headers(*args, **kwargs):
        raise AssertionError("discovery read a header")

    monkeypatch.setattr(gguf_header, "read_header", no_headers)
    found = discover()
    assert len([m for m in found.models if m.source != "catalog"]) >= 1000
    assert sum(1 for m in found.models if m.name.startswith("hf:org/repo")) == 300


def test_the_store_folders_follow_the_tools_own_environment(monkeypatch, tmp_path):
    for name in ("HF_HUB_CACHE", "HF_HOME", "XDG_CACHE_HOME", "OLLAMA_MODELS", "LLAMA_CACHE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert hub_cache.hub_cache_dir() == tmp_path / ".cache" / "huggingface" / "hub"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "x"))
    assert hub_cache.hub_cache_dir() == tmp_path / "x" / "huggingface" / "hub"
    assert hub_cache.llama_cache_dir() == tmp_path / "x" / "llama.cpp"
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    assert hub_cache.hub_cache_dir() == tmp_path / "hf" / "hub"
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    assert hub_cache.hub_cache_dir() == tmp_path / "hub"
    assert ollama_store.store_dirs()[0] == tmp_path / ".ollama" / "models"
    monkeypatch.setenv("OLLAMA_MODELS", str(tmp_path / "o"))
    assert ollama_store.store_dirs() == [tmp_path / "o"]
    assert lmstudio_store.home_dir() == tmp_path / ".cache" / "lm-studio"
    (tmp_path / ".lmstudio").mkdir()
    assert lmstudio_store.home_dir() == tmp_path / ".lmstudio"
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / ".lmstudio-home-pointer").write_text(f"{tmp_path / 'elsewhere'}\n")
    assert lmstudio_store.home_dir() == tmp_path / "elsewhere"
