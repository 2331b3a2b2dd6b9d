"""`chatapp themes list`."""

from __future__ import annotations

from chatapp import paths
from chatapp.errors import ConfigError

SHIPPED = ("chatapp-dark", "chatapp-light", "chatapp-high-contrast")


def user_theme(file_name: str, text: str) -> None:
    paths.user_themes_dir().mkdir(parents=True, exist_ok=True)
    (paths.user_themes_dir() / file_name).write_text(text)


def test_list_shows_the_shipped_themes(invoke):
    result = invoke("themes", "list")
    assert result.exit_code == 0
    for name in SHIPPED:
        assert name in result.stdout
    assert "chatapp-dark *" in result.stdout
    assert "built-in" in result.stdout and "light" in result.stdout
    assert result.stderr == ""


def test_list_paints_palette_and_panel_swatches(invoke):
    result = invoke("themes", "list", env={"FORCE_COLOR": "1", "COLORTERM": "truecolor"})
    assert result.exit_code == 0
    # chatapp-dark's background (#14161b) and token-a (#1f2430) as truecolour backgrounds.
    assert "48;2;20;22;27m" in result.stdout
    assert "48;2;31;36;48m" in result.stdout


def test_list_shows_user_themes_and_warns_about_bad_files(invoke):
    user_theme("mine.toml", 'name = "mine"\nprimary = "#ff8800"\ndark = false\n')
    user_theme("broken.toml", 'name = "broken"\nprimary = "#ff88zz"\n')
    result = invoke("themes", "list")
    assert result.exit_code == 0
    assert "mine" in result.stdout and "user: mine.toml" in result.stdout
    (warning,) = result.stderr.splitlines()
    assert "broken.toml" in warning and "primary" in warning and "#ff88zz" in warning


def test_list_warns_when_the_configured_theme_is_missing(invoke):
    paths.config_dir().mkdir(parents=True, exist_ok=True)
    paths.config_file().write_text('theme = "gone"\n')
    result = invoke("themes", "list")
    assert result.exit_code == 0
    assert "'gone'" in result.stderr


def test_list_with_a_broken_config_is_a_config_error(invoke):
    paths.config_dir().mkdir(parents=True, exist_ok=True)
    paths.config_file().write_text("theme = \n")
    result = invoke("themes", "list")
    assert result.exit_code == 2 and result.stderr.startswith(f"chatapp: {ConfigError.title}: ")


def test_list_end_to_end(chatapp_exe):
    user_theme("bad.toml", "not toml at all")
    result = chatapp_exe("themes", "list")
    assert result.returncode == 0, result.stderr
    for name in SHIPPED:
        assert name in result.stdout
    assert "bad.toml" in result.stderr and "invalid TOML" in result.stderr
