"""Presets from the config file and the presets folder: listed with their problems in one line
each, chosen with --preset or as the model's default, under the command line's options, and
kept in ask's records and the saved session."""

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
    assert set(by_name) == {"terse", "long"}
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
    for name, said in (("hot", "temperature must be float"), ("nope", "no preset 'nope' (presets: long, terse")):
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
    exported = json.loads(chatapp_exe("sessions", "export", "p", "--format", "json").stdout)
    assert exported["choices"]["preset"] == "long"
    assert [entry.get("preset") for entry in exported["journal"]] == ["terse", "long"]
    assert exported["system_prompt"] == "Answer in one word."
