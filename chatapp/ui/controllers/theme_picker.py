"""The app's side of themes: the theme picker (Ctrl+T), which previews each theme as it is
highlighted and puts the old one back on Esc, and keeping a chosen theme for the next start."""

from __future__ import annotations

from typing import Protocol

from functools import partial

from textual.command import CommandPalette, DiscoveryHit, Hit, Hits, Provider

from chatapp.config import save_setting
from chatapp.errors import ConfigError
from chatapp.ui.host import ChatHost
from chatapp.ui.themes import ThemeLoadResult


class ThemePicker(Provider):
    """chatapp's themes (shipped and the user's), the same list `chatapp themes list` shows:
    Textual's built-in themes lack the panels' colours and are not offered. Each hit's text is
    the theme name, so the app can preview the highlighted one (it watches
    CommandPalette.OptionHighlighted)."""

    def _themes(self) -> list[str]:
        return sorted(self.app.theme_result.names())

    def _choose(self, name: str) -> None:
        self.app.theme = name

    async def discover(self) -> Hits:
        # The palette highlights (so previews) the first hit when it opens: the current theme.
        current = self.app.theme
        for name in [current, *(n for n in self._themes() if n != current)]:
            yield DiscoveryHit(name, partial(self._choose, name), text=name,
                               help="the theme now" if name == current else None)

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for name in self._themes():
            score = matcher.match(name)
            if score > 0:
                yield Hit(score, matcher.highlight(name), partial(self._choose, name), text=name)


class ThemeHost(ChatHost, Protocol):
    """What the theme controller needs of the app beyond ChatHost."""

    theme: str
    theme_result: ThemeLoadResult


class ThemeController:
    def __init__(self, app: ThemeHost) -> None:
        self.app = app
        self._before_preview: str | None = None
        """The theme before the picker opened, while it is open."""

    def pick(self) -> None:
        self._before_preview = self.app.theme
        self.app.push_screen(CommandPalette(providers=[ThemePicker],
                                            placeholder="Search for themes… (moving previews; Esc restores)"))

    def preview(self, event: CommandPalette.OptionHighlighted) -> None:
        if self._before_preview is None:
            return
        hit = getattr(event.highlighted_event.option, "hit", None)
        name = getattr(hit, "text", None)
        if name in self.app.theme_result.names():
            self.app.theme = name

    def closed(self, event: CommandPalette.Closed) -> None:
        before, self._before_preview = self._before_preview, None
        if before is None:
            return
        if not event.option_selected:
            self.app.theme = before
        elif self.app.theme != before:
            self._remember(self.app.theme)

    def _remember(self, name: str) -> None:
        """A theme picked in the app is the next start's theme too."""
        try:
            path = save_setting("theme", name)
        except ConfigError as exc:
            self.app.notify(f"theme not saved: {exc}", title="Theme", severity="warning", timeout=8, markup=False)
            return
        self.app.notify(f"{name} saved as the theme in {path}", title="Theme", timeout=4, markup=False)
