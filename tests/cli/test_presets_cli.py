"""Presets from the config file and the presets folder: listed with their problems in one line
each, chosen with --preset or as the model's default, under the command line's options, and
kept in ask's records and the saved session, which goes on with it; other tools' presets imported."""

from __future__ import annotations

import json
from pathlib import Path

CONFIG = """max_tokens = 20
temperature = 0.8

[presets.terse]
system_prompt = "Answer in one word."
max_tokens = 3
temperature = 0.0
model = "smollm2-135m-instruct"

[presets.hot]
temperature = "very"

[presets.clock]
tools = "auto"
max_tokens = 8
"""


def write_presets(isolated_dirs) -> Path:
    folder = Path(isolated_dirs["XDG_CONFIG_HOME"]) / "chatapp"
    (folder / "presets").mkdir(parents=True)
    (folder / "config.toml").write_text(CONFIG)
    (folder / "presets" / "long.toml").write_text('max_tokens = 5\nn_ctx = 1024\nthreads = 1\n')
    (folder / "presets" / "wide.toml").write_text('kv_type = "q9"\n')
    (folder / "presets" / "keyed.toml").write_text('api_key = "sk-1"\n')
    return folder


def test_presets_list_shows_each_preset_and_each_bad_one_in_one_line(chatapp_exe, isolated_dirs):
    folder = write_presets(isolated_dirs)
    out = chatapp_exe("presets", "list", "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    by_name = {p["name"]: p for p in data["presets"]}
    assert set(by_name) == {"terse", "long", "clock"} and by_name["clock"]["tools"] == "auto"
    assert by_name["terse"]["model"] == "smollm2-135m-instruct"
    assert by_name["terse"]["settings"] == {"system_prompt": "Answer in one word.", "max_tokens": 3,
                                            "temperature": 0.0}
    assert by_name["long"]["source"] == str(folder / "presets" / "long.toml")
    problems = {p["name"]: p["problem"] for p in data["problems"]}
    assert problems["hot"] == f"{folder / 'config.toml'} [presets.hot]: temperature must be float, got 'very'"
    assert problems["wide"].startswith(f"{folder / 'presets' / 'wide.toml'}: kv_type must be one of")
    assert "api_key cannot be set by a preset" in problems["keyed"] and "sk-1" not in out.stdout
    shown = chatapp_exe("presets", "list")
    assert shown.returncode == 0 and "terse" in shown.stdout
    assert shown.stderr.count("\n") == 3 and "Traceback" not in shown.stderr


def test_a_bad_or_unknown_preset_is_one_line_before_the_model_loads(chatapp_exe, isolated_dirs):
    write_presets(isolated_dirs)
    for name, said in (("hot", "temperature must be float"), ("nope", "no preset 'nope' (presets: clock, long, terse")):
        out = chatapp_exe("ask", "--preset", name, "hi")
        assert out.returncode != 0 and said in out.stderr
        assert out.stderr.strip().count("\n") == 0 and "Traceback" not in out.stderr


def test_ask_takes_the_models_preset_under_its_options_and_keeps_its_name(chatapp_exe, isolated_dirs):
    write_presets(isolated_dirs)
    out = chatapp_exe("ask", "--json", "--threads", "1", "--session", "p", "Name a colour.")
    assert out.returncode == 0, out.stderr
    record = json.loads(out.stdout)
    assert "preset 'terse': the default of this model" in out.stderr
    assert record["preset"] == "terse" and record["decode_tokens"] <= 3  # the preset's max_tokens over the config's
    out = chatapp_exe("ask", "--json", "--threads", "1", "--session", "p", "--preset", "long", "-n", "2", "Why?")
    assert out.returncode == 0, out.stderr
    record = json.loads(out.stdout)
    assert record["preset"] == "long" and record["decode_tokens"] <= 2  # -n over the preset's max_tokens
    out = chatapp_exe("ask", "--json", "--threads", "1", "--session", "p", "And?")  # the session's preset holds
    assert out.returncode == 0, out.stderr
    assert "preset 'long', as session 'p' was left" in out.stderr and json.loads(out.stdout)["preset"] == "long"
    exported = json.loads(chatapp_exe("sessions", "export", "p", "--format", "json").stdout)
    assert exported["choices"]["preset"] == "long"
    assert [entry.get("preset") for entry in exported["journal"]] == ["terse", "long", "long"]
    assert exported["system_prompt"] == "Answer in one word."


LM_STUDIO = {"name": "Creative Writing", "operation": {"fields": [
    {"key": "llm.prediction.temperature", "value": 1.1},
    {"key": "llm.prediction.topKSampling", "value": 50},
    {"key": "llm.prediction.minPSampling", "value": {"checked": False, "value": 0.05}},
    {"key": "llm.prediction.topPSampling", "value": {"checked": True, "value": 0.9}},
    {"key": "llm.prediction.repeatPenalty", "value": {"checked": True, "value": 1.1}},
    {"key": "llm.prediction.systemPrompt", "value": "You are a poet."}]},
    "load": {"fields": [{"key": "llm.load.contextLength", "value": 8192}]}}
MODELS_INI = """[*]
ctx-size = 0
mmap = 1

[Qwen3.5-4B]
hf = unsloth/Qwen3.5-4B-GGUF:Q4_K_M
ctx-size = 16384
top-k = 0
temp = 1.0

[small]
model = /models/SmolLM2-135M-Instruct-Q4_1.gguf
temp = 0.2
cache-type-k = q8_0
"""


def test_lm_studio_and_llama_server_presets_import_as_chatapps_own(chatapp_exe, isolated_dirs, tmp_path):
    lm = tmp_path / "creative.preset.json"
    lm.write_text(json.dumps(LM_STUDIO))
    ini = tmp_path / "models.ini"
    ini.write_text(MODELS_INI)
    out = chatapp_exe("presets", "import", str(lm))
    assert out.returncode == 0, out.stderr
    assert "imported preset 'creative-writing'" in out.stdout and "llm.prediction.repeatPenalty" in out.stderr
    out = chatapp_exe("presets", "import", str(ini))
    assert out.returncode == 0 and "chat-template-kwargs" not in out.stderr and "mmap" in out.stderr
    listed = {p["name"]: p for p in json.loads(chatapp_exe("presets", "list", "--json").stdout)["presets"]}
    assert listed["creative-writing"]["settings"] == {"temperature": 1.1, "top_k": 50, "min_p": 0.0, "top_p": 0.9,
                                                      "system_prompt": "You are a poet.", "n_ctx": 8192}
    assert listed["qwen3.5-4b"]["model"] == "hf:unsloth/Qwen3.5-4B-GGUF:Q4_K_M"
    assert listed["qwen3.5-4b"]["settings"] == {"n_ctx": 16384, "top_k": 0, "temperature": 1.0}
    assert listed["small"] == {**listed["small"], "model": "SmolLM2-135M-Instruct-Q4_1.gguf",
                               "settings": {"temperature": 0.2, "kv_type": "q8_0"}}
    small = Path(listed["small"]["source"])
    small.unlink()
    again = chatapp_exe("presets", "import", str(ini))  # one exists: nothing is written, small included
    assert again.returncode != 0 and "preset 'qwen3.5-4b' exists" in again.stderr and not small.exists()
    assert chatapp_exe("presets", "import", str(ini), "--replace").returncode == 0 and small.exists()
    bad = tmp_path / "bad.ini"
    for text, said in (("[x]\ntemp = hot\n", "[x]: temp must be a number, got 'hot'"),
                       ("[x]\ncache-type-k = q9\n", "kv_type must be one of"),
                       ("not a preset", "neither an LM Studio preset (JSON) nor a llama-server preset INI")):
        bad.write_text(text)
        out = chatapp_exe("presets", "import", str(bad))
        assert out.returncode != 0 and said in out.stderr and out.stderr.strip().count("\n") == 0


def test_a_preset_naming_the_models_sha256_is_its_default(chatapp_exe, isolated_dirs, default_model_path):
    import hashlib

    digest = hashlib.sha256(Path(default_model_path).read_bytes()).hexdigest()
    folder = Path(isolated_dirs["XDG_CONFIG_HOME"]) / "chatapp" / "presets"
    folder.mkdir(parents=True)
    (folder / "by-hash.toml").write_text(f'model = "{digest.upper()}"\nmax_tokens = 2\n')
    (folder / "other.toml").write_text(f'model = "{"0" * 64}"\nmax_tokens = 9\n')
    out = chatapp_exe("ask", "--json", "--threads", "1", "--incognito", "Name a colour.")
    assert out.returncode == 0, out.stderr
    record = json.loads(out.stdout)
    assert "preset 'by-hash': the default of this model" in out.stderr
    assert record["preset"] == "by-hash" and record["decode_tokens"] <= 2


def test_a_presets_tools_are_offered_unless_the_command_line_says_otherwise(chatapp_exe, isolated_dirs):
    write_presets(isolated_dirs)
    out = chatapp_exe("ask", "--json", "--threads", "1", "--incognito", "--preset", "clock", "What time is it?")
    assert out.returncode == 0, out.stderr
    record = json.loads(out.stdout)
    assert record["preset"] == "clock" and "current_time" in record["tool_schema_tokens"]
    plain = chatapp_exe("ask", "--json", "--threads", "1", "--incognito", "--preset", "clock", "--schema", "answer",
                        "What time is it?")
    assert plain.returncode == 0, plain.stderr
    assert "tool_schema_tokens" not in json.loads(plain.stdout)  # --schema shapes the reply: no tools then


def test_a_presets_tools_naming_no_tool_are_one_line_naming_the_preset_before_the_model_loads(
        chatapp_exe, isolated_dirs, tmp_path):
    """Issue 56: the preset's `tools` is checked against the offered tools before the model
    loads (a missing model file would be the line otherwise), and the line names the preset."""
    folder = write_presets(isolated_dirs)
    (folder / "presets" / "typo.toml").write_text('tools = "curent_time"\n')
    out = chatapp_exe("ask", "--preset", "typo", "--model", str(tmp_path / "absent.gguf"), "What time is it?")
    assert out.returncode == 2, out.stderr
    assert "preset typo's tools must be auto, none, required or an offered tool's name" in out.stderr
    assert "got 'curent_time'" in out.stderr and "current_time" in out.stderr
    assert out.stderr.strip().count("\n") == 0 and "Traceback" not in out.stderr
