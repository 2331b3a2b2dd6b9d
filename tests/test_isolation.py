"""The suite runs in a developer's own environment and must give the same results there: a
server exported in CHATAPP_SERVER, a key, model folders in HF_HOME or OLLAMA_MODELS and a
theme of their own change nothing (tests/conftest.py's isolated_env)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from chatapp.ui.themes import load_themes
from tests.conftest import LEAKING_VARIABLES

AS_STARTED = dict(os.environ)
"""The environment as the run started: read at collection, before isolated_env changes it."""

ROOT = Path(__file__).resolve().parent.parent

PERSONAL_THEME = 'name = "my-own"\nprimary = "#ff00ff"\nbackground = "#ff00ff"\nforeground = "#ff00ff"\n'


def test_every_test_starts_without_the_developers_variables_and_with_a_home_of_its_own(isolated_env, tmp_path):
    assert not [var for var in LEAKING_VARIABLES if var in os.environ]
    assert Path(os.environ["HOME"]) == Path.home() == tmp_path / "home"


def _developer_env(tmp_path: Path) -> dict[str, str]:
    """The environment of someone who exports their own server, key and model folders and keeps a
    theme of their own in their config folder."""
    config = tmp_path / "developer-config"
    (config / "chatapp" / "themes").mkdir(parents=True)
    (config / "chatapp" / "themes" / "my-own.toml").write_text(PERSONAL_THEME)
    return {**AS_STARTED, "XDG_CONFIG_HOME": str(config),
            "CHATAPP_SERVER": "http://127.0.0.1:9",  # the discard port: nothing answers there
            "CHATAPP_API_KEY": "sk-developer", "HF_HOME": str(tmp_path / "hf"),
            "HF_HUB_CACHE": str(tmp_path / "hf" / "hub"), "OLLAMA_MODELS": str(tmp_path / "ollama"),
            "LLAMA_CACHE": str(tmp_path / "llama-cache")}


def _pytest(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--durations=0", *args],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)


def test_an_exported_server_and_a_personal_theme_change_no_result(tmp_path):
    env = _developer_env(tmp_path)
    assert "my-own" in load_themes(user_dir=Path(env["XDG_CONFIG_HOME"]) / "chatapp" / "themes").names()

    run = _pytest(env, "tests/cli/test_core_cli.py::test_ask_streams_reply_then_a_stats_line",
                  "tests/cli/test_core_cli.py::test_ask_json_one_object_per_turn")
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    assert re.search(r"\b2 passed\b", run.stdout), run.stdout[-2000:]

    collected = _pytest(env, "--collect-only", "tests/ui/test_first_hour_contrast.py")
    assert collected.returncode == 0, collected.stdout[-3000:]
    cases = re.findall(r"\[(.+?)\]$", collected.stdout, re.MULTILINE)
    assert sorted(cases) == sorted(load_themes(user_dir=Path(os.devnull)).names())
