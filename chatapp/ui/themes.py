"""Theme files: the built-in ones shipped in `themes/`, then the user's own.

Each TOML file maps onto a `textual.theme.Theme`. A file that fails to parse or
validate is skipped and reported, so one bad theme never stops the app.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field, replace
from functools import cache
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Any, Protocol

from textual.color import Color, ColorParseError
from textual.design import ColorSystem
from textual.theme import Theme

from chatapp import paths
from chatapp.errors import ThemeError

DEFAULT_THEME = "chatapp-dark"
DEFAULT_LIGHT_THEME = "chatapp-light"

CHATAPP_VARIABLES = (
    "token-a",
    "token-b",
    "token-special",
    "token-cached",
    "token-prefill",
    "token-generated",
    "token-retrieved-a",
    "token-retrieved-b",
    "token-drafted-a",
    "token-drafted-b",
    "kv-system",
    "kv-user",
    "kv-assistant",
    "kv-thought",
    "kv-retrieved",
    "kv-image",
    "kv-tools",
    "kv-call",
    "kv-tool",
    "kv-template",
    "kv-free",
)
"""The panels' own CSS variables; every built-in theme defines all of them."""

COLOUR_KEYS = (
    "primary",
    "secondary",
    "accent",
    "foreground",
    "background",
    "surface",
    "panel",
    "boost",
    "warning",
    "error",
    "success",
)
KNOWN_KEYS = frozenset({"name", "dark", "variables", *COLOUR_KEYS})

# Theme names may not hold commas: App.get_theme reads "a,b" as a fallback list.
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
# Textual accepts "colour NN%" and "auto NN%" wherever it wants a colour.
_ALPHA_SUFFIX = re.compile(r"\s+\d{1,3}(\.\d+)?%$")


@dataclass(frozen=True)
class ThemeFailure:
    path: Path
    problem: str

    def __str__(self) -> str:
        return f"{self.path}: {self.problem}"


@dataclass
class ThemeLoadResult:
    themes: list[Theme] = field(default_factory=list)
    failures: list[ThemeFailure] = field(default_factory=list)
    user_files: dict[str, Path] = field(default_factory=dict)
    """Theme name -> the user file it came from; themes not here are built in."""

    def get(self, name: str) -> Theme | None:
        return next((theme for theme in self.themes if theme.name == name), None)

    def names(self) -> list[str]:
        return [theme.name for theme in self.themes]

    def variable_defaults(self) -> dict[str, str]:
        """Fallbacks for App.get_theme_variable_defaults, so TCSS that uses
        $token-a still parses under a theme without it (Textual's own themes)."""
        theme = self.get(DEFAULT_THEME)
        if theme is None:
            return {}
        return {name: theme.variables[name] for name in CHATAPP_VARIABLES if name in theme.variables}


class ThemeRegistry(Protocol):
    def register_theme(self, theme: Theme) -> None: ...


def register_themes(app: ThemeRegistry, result: ThemeLoadResult) -> None:
    for theme in result.themes:
        app.register_theme(theme)


def load_themes(user_dir: Path | None = None) -> ThemeLoadResult:
    """Built-in themes first, then user themes; a user theme replaces a same-named one."""
    result = ThemeLoadResult()
    builtin = resources.files("chatapp").joinpath("data", "themes")
    for resource in sorted(builtin.iterdir(), key=lambda r: r.name):
        if resource.name.endswith(".toml"):
            theme = _read(result, resource)
            if theme is not None:
                result.themes.append(theme)
    user_dir = paths.user_themes_dir() if user_dir is None else user_dir
    if user_dir.is_dir():
        for path in sorted(user_dir.glob("*.toml")):
            _add_user_theme(result, path)
    return result


def _read(result: ThemeLoadResult, resource: Traversable) -> Theme | None:
    try:
        return parse_theme(resource.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        problem = f"cannot read: {exc}"
    except ThemeError as exc:
        problem = exc.message
    result.failures.append(ThemeFailure(Path(str(resource)), problem))
    return None


def _add_user_theme(result: ThemeLoadResult, path: Path) -> None:
    theme = _read(result, path)
    if theme is None:
        return
    if theme.name in result.user_files:
        first = result.user_files[theme.name].name
        result.failures.append(ThemeFailure(path, f"theme {theme.name!r} is already defined by {first}"))
        return
    # A user theme may leave out the panels' variables: borrow them from the
    # built-in theme of the same darkness rather than fail the stylesheet.
    base = result.get(DEFAULT_THEME if theme.dark else DEFAULT_LIGHT_THEME)
    inherited = {k: v for k, v in base.variables.items() if k in CHATAPP_VARIABLES} if base else {}
    theme = replace(theme, variables={**inherited, **theme.variables})
    existing = result.get(theme.name)
    if existing is None:
        result.themes.append(theme)
    else:
        result.themes[result.themes.index(existing)] = theme
    result.user_files[theme.name] = path


def parse_theme(text: str) -> Theme:
    """Build a Theme from a theme file's text; ThemeError says what is wrong, in one line."""
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ThemeError(f"invalid TOML: {exc}") from None
    unknown = sorted(set(raw) - KNOWN_KEYS)
    if unknown:
        raise ThemeError(f"unknown key {unknown[0]!r}")
    for key in ("name", "primary"):
        if key not in raw:
            raise ThemeError(f"missing required key {key!r}")
    name = raw["name"]
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ThemeError(f"name must be letters, digits, '-', '_' or '.', got {name!r}")
    dark = raw.get("dark", True)
    if not isinstance(dark, bool):
        raise ThemeError(f"dark must be true or false, got {dark!r}")
    colours = {key: _colour(key, raw[key]) for key in COLOUR_KEYS if key in raw}
    variables = _variables(raw.get("variables", {}))
    return Theme(name=name, dark=dark, variables=variables, **colours)


def _colour(key: str, value: Any) -> str:
    if not isinstance(value, str):
        raise ThemeError(f"{key} must be a colour string, got {value!r}")
    try:
        Color.parse(value)
    except ColorParseError as exc:
        raise ThemeError(f"{key}: {exc}") from None
    return value


def _variables(table: Any) -> dict[str, str]:
    if not isinstance(table, dict):
        raise ThemeError("variables must be a table")
    textual_names = _textual_variable_names()
    variables = {}
    for key, value in table.items():
        if key in CHATAPP_VARIABLES:
            # The panels also paint with these from Python (Rich styles), so they
            # must be plain colours, without Textual's "auto" or alpha suffix.
            variables[key] = _colour(f"variables.{key}", value)
        elif key in textual_names:
            variables[key] = _textual_variable(key, value)
        else:
            raise ThemeError(f"unknown variable {key!r}")
    return variables


def _textual_variable(key: str, value: Any) -> str:
    if not isinstance(value, str):
        raise ThemeError(f"variables.{key} must be a string, got {value!r}")
    if key.endswith("-style") or "-style-" in key:
        return value
    base = _ALPHA_SUFFIX.sub("", value.strip())
    if base != "auto":
        _colour(f"variables.{key}", base)
    return value


@cache
def _textual_variable_names() -> frozenset[str]:
    """Every variable name Textual's design system knows in this version."""
    return frozenset(ColorSystem(primary="#000000").generate())
