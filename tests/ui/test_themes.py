"""Theme files: every shipped theme loads, and one bad user file never stops the rest."""

from __future__ import annotations

import pytest
from textual.app import App, ComposeResult
from textual.color import Color
from textual.theme import BUILTIN_THEMES
from textual.widgets import Static

from chatapp.config import Settings
from chatapp.errors import ThemeError
from chatapp.ui.themes import (
    CHATAPP_VARIABLES,
    DEFAULT_THEME,
    load_themes,
    parse_theme,
    register_themes,
)

TEXT_VARIABLES = ("token-special", "token-cached", "token-prefill", "token-generated")


def contrast(a: str, b: str) -> float:
    """WCAG 2 contrast ratio."""

    def luminance(colour: str) -> float:
        channels = [c / 255 for c in Color.parse(colour).rgb]
        r, g, b = (c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4 for c in channels)
        return 0.2126 * r + 0.7152 * g + 0.0722 * b

    high, low = sorted((luminance(a), luminance(b)), reverse=True)
    return (high + 0.05) / (low + 0.05)


@pytest.fixture
def shipped(tmp_path):
    return load_themes(user_dir=tmp_path / "no-user-themes")


def test_shipped_themes_all_load(shipped):
    assert shipped.failures == []
    assert len(shipped.themes) >= 4
    assert {"chatapp-dark", "chatapp-light", "chatapp-high-contrast"} <= set(shipped.names())
    assert shipped.user_files == {}
    assert not shipped.get("chatapp-light").dark
    assert shipped.get("chatapp-dark").dark


def test_the_default_theme_is_shipped_and_is_the_settings_default(shipped):
    assert DEFAULT_THEME == Settings().theme
    assert shipped.get(DEFAULT_THEME) is not None


def test_every_shipped_theme_defines_every_panel_variable(shipped):
    for theme in shipped.themes:
        missing = [name for name in CHATAPP_VARIABLES if name not in theme.variables]
        assert missing == [], theme.name
        assert theme.variables["token-a"] != theme.variables["token-b"], theme.name


def test_text_is_readable_on_every_shipped_theme(shipped):
    for theme in shipped.themes:
        # WCAG AA everywhere; the high-contrast theme promises AAA.
        needed = 7.0 if theme.name == "chatapp-high-contrast" else 4.5
        v = theme.variables
        assert contrast(theme.foreground, theme.background) >= needed, theme.name
        assert contrast(theme.foreground, v["token-a"]) >= needed, theme.name
        assert contrast(theme.foreground, v["token-b"]) >= needed, theme.name
        for key in TEXT_VARIABLES:
            assert contrast(v[key], theme.background) >= needed, (theme.name, key)


def test_high_contrast_is_black_white_and_yellow(shipped):
    theme = shipped.get("chatapp-high-contrast")
    assert Color.parse(theme.background) == Color.parse("black")
    assert Color.parse(theme.foreground) == Color.parse("white")
    assert Color.parse(theme.accent) == Color.parse("yellow")


def test_loading_does_not_touch_textuals_builtin_themes(tmp_path):
    before = dict(BUILTIN_THEMES)
    load_themes(user_dir=tmp_path)
    assert BUILTIN_THEMES == before


def test_a_missing_user_dir_is_not_created(tmp_path):
    result = load_themes(user_dir=tmp_path / "themes")
    assert result.failures == []
    assert not (tmp_path / "themes").exists()


def test_user_themes_come_from_the_config_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    (tmp_path / "chatapp" / "themes").mkdir(parents=True)
    (tmp_path / "chatapp" / "themes" / "mine.toml").write_text('name = "mine"\nprimary = "#ff0000"\n')
    result = load_themes()
    assert result.user_files == {"mine": tmp_path / "chatapp" / "themes" / "mine.toml"}


BAD_FILES = {
    "bad-colour.toml": ('name = "c"\nprimary = "#12345g"\n', "primary"),
    "bad-toml.toml": ('name = "t"\nprimary = "#ff0000\n', "invalid TOML"),
    "no-name.toml": ('primary = "#ff0000"\n', "missing required key 'name'"),
    "no-primary.toml": ('name = "p"\n', "missing required key 'primary'"),
    "unknown-key.toml": ('name = "u"\nprimary = "red"\nprimry = "red"\n', "unknown key 'primry'"),
    "unknown-var.toml": ('name = "v"\nprimary = "red"\n[variables]\ntokn-a = "red"\n', "unknown variable 'tokn-a'"),
    "bad-var.toml": ('name = "w"\nprimary = "red"\n[variables]\ntoken-a = "blurple"\n', "variables.token-a"),
    "bad-dark.toml": ('name = "d"\nprimary = "red"\ndark = "yes"\n', "dark must be true or false"),
    "comma-name.toml": ('name = "a,b"\nprimary = "red"\n', "name must be"),
    "binary.toml": (b"\xff\xfe\x00", "cannot read"),
}


def test_bad_user_files_are_reported_and_good_ones_still_load(tmp_path):
    for file_name, (content, _) in BAD_FILES.items():
        path = tmp_path / file_name
        path.write_bytes(content) if isinstance(content, bytes) else path.write_text(content)
    (tmp_path / "good.toml").write_text('name = "good"\nprimary = "#5fa8ff"\n')
    (tmp_path / "notes.txt").write_text("not a theme")

    result = load_themes(user_dir=tmp_path)

    assert "good" in result.names()
    reported = {failure.path.name: str(failure) for failure in result.failures}
    assert set(reported) == set(BAD_FILES)
    for file_name, (_, problem) in BAD_FILES.items():
        line = reported[file_name]
        assert file_name in line and problem in line
        assert "\n" not in line


def test_a_user_theme_overrides_a_builtin_of_the_same_name(tmp_path, shipped):
    path = tmp_path / "my-dark.toml"
    path.write_text('name = "chatapp-dark"\nprimary = "#00ff00"\n[variables]\ntoken-a = "#010203"\n')
    result = load_themes(user_dir=tmp_path)
    assert result.names() == shipped.names()
    theme = result.get("chatapp-dark")
    assert theme.primary == "#00ff00"
    assert theme.variables["token-a"] == "#010203"
    assert result.user_files == {"chatapp-dark": path}


def test_a_user_theme_borrows_missing_panel_variables_by_darkness(tmp_path, shipped):
    (tmp_path / "pale.toml").write_text('name = "pale"\nprimary = "#333333"\ndark = false\n')
    (tmp_path / "dim.toml").write_text('name = "dim"\nprimary = "#cccccc"\n')
    result = load_themes(user_dir=tmp_path)
    light, dark = shipped.get("chatapp-light"), shipped.get("chatapp-dark")
    for name in CHATAPP_VARIABLES:
        assert result.get("pale").variables[name] == light.variables[name]
        assert result.get("dim").variables[name] == dark.variables[name]


def test_two_user_files_with_one_name_keep_the_first(tmp_path):
    (tmp_path / "a.toml").write_text('name = "twin"\nprimary = "red"\n')
    (tmp_path / "b.toml").write_text('name = "twin"\nprimary = "blue"\n')
    result = load_themes(user_dir=tmp_path)
    assert result.get("twin").primary == "red"
    assert [str(f) for f in result.failures] == [f"{tmp_path / 'b.toml'}: theme 'twin' is already defined by a.toml"]


def test_textual_variables_accept_textuals_own_value_forms():
    theme = parse_theme(
        'name = "x"\nprimary = "red"\n[variables]\n'
        'input-selection-background = "#ffff00 45%"\nbutton-color-foreground = "auto 87%"\n'
        'block-cursor-text-style = "bold"\n'
    )
    assert theme.variables["input-selection-background"] == "#ffff00 45%"
    with pytest.raises(ThemeError, match="input-selection-background"):
        parse_theme('name = "x"\nprimary = "red"\n[variables]\ninput-selection-background = "nope 45%"\n')


class Host(App):
    CSS = "Static { background: $token-a; color: $token-special; }"

    def __init__(self, result):
        self.result = result
        super().__init__()

    def get_theme_variable_defaults(self) -> dict[str, str]:
        return self.result.variable_defaults()

    def compose(self) -> ComposeResult:
        yield Static("token")

    def on_mount(self) -> None:
        register_themes(self, self.result)


async def test_panel_variables_reach_tcss_and_python(shipped):
    app = Host(shipped)
    async with app.run_test() as pilot:
        static = app.query_one(Static)
        for theme in shipped.themes:
            app.theme = theme.name
            await pilot.pause()
            assert app.theme_variables["token-a"] == theme.variables["token-a"]
            assert static.styles.background == Color.parse(theme.variables["token-a"])
        # Textual's own themes lack the panel variables; the defaults fill in.
        app.theme = "textual-light"
        await pilot.pause()
        assert app.theme_variables["token-a"] == shipped.get(DEFAULT_THEME).variables["token-a"]
