"""`chatapp config path|show|init`."""

from __future__ import annotations

import tomllib

from chatapp import paths
from chatapp.config import Settings, to_toml
from chatapp.errors import ConfigError


def test_path_prints_the_xdg_config_file(invoke, tmp_path):
    result = invoke("config", "path")
    assert result.exit_code == 0
    assert result.stdout.strip() == str(tmp_path / "config" / "chatapp" / "config.toml")
    assert not paths.config_dir().exists()


def test_show_without_a_file_says_so_and_prints_defaults(invoke):
    result = invoke("config", "show")
    assert result.exit_code == 0
    assert "does not exist" in result.stdout.splitlines()[0]
    assert "# from file" not in result.stdout
    assert Settings(**tomllib.loads(result.stdout)) == Settings()


def test_show_marks_which_values_come_from_the_file(invoke):
    paths.config_dir().mkdir(parents=True)
    paths.config_file().write_text('n_ctx = 2048\ntheme = "chatapp-light"\n')
    result = invoke("config", "show")
    assert result.exit_code == 0
    marks = {line.split(" = ")[0]: line.rsplit("# ", 1)[1] for line in result.stdout.splitlines()[1:]}
    assert marks["n_ctx"] == "from file" and marks["theme"] == "from file"
    assert marks["model"] == "default"
    shown = Settings(**tomllib.loads(result.stdout))
    assert shown.n_ctx == 2048 and shown.theme == "chatapp-light"


def test_show_raises_a_config_error_for_a_bad_file(invoke):
    paths.config_dir().mkdir(parents=True)
    paths.config_file().write_text('kv_type = "q5"\n')
    result = invoke("config", "show")
    assert result.exit_code == 2 and result.stderr.startswith(f"chatapp: {ConfigError.title}: ")
    assert "kv_type" in result.stderr and len(result.stderr.splitlines()) == 1


def test_init_writes_the_defaults_once(invoke):
    result = invoke("config", "init")
    assert result.exit_code == 0
    assert paths.config_file().read_text() == to_toml(Settings())
    again = invoke("config", "init")
    assert again.exit_code == 2 and again.stderr.startswith(f"chatapp: {ConfigError.title}: ")
    assert "already exists" in again.stderr
    paths.config_file().write_text("n_ctx = 64\n")
    assert invoke("config", "init", "--force").exit_code == 0
    assert paths.config_file().read_text() == to_toml(Settings())


def test_a_broken_config_exits_2_with_one_line_end_to_end(chatapp_exe):
    paths.config_dir().mkdir(parents=True)
    paths.config_file().write_text("n_ctx = [1,\n")
    result = chatapp_exe("config", "show")
    assert result.returncode == 2
    assert result.stdout == ""
    assert len(result.stderr.strip().splitlines()) == 1
    assert "Traceback" not in result.stderr
    assert str(paths.config_file()) in result.stderr


def test_show_end_to_end(chatapp_exe):
    result = chatapp_exe("config", "show")
    assert result.returncode == 0, result.stderr
    assert Settings(**tomllib.loads(result.stdout)) == Settings()
