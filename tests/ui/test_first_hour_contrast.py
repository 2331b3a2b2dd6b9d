"""Every confidence shade is readable on every shipped theme (WCAG AA, 4.5:1): synthwave's
"below 10%" shade gave white text 3.4:1."""

from __future__ import annotations

import pytest
from textual.app import App, ComposeResult
from textual.color import Color
from textual.widgets import Static

from chatapp.engine.sampling import BANDS
from chatapp.ui.themes import load_themes, register_themes
from chatapp.ui.widgets.confidence import band_styles
from chatapp.ui.widgets.paint import READABLE, contrast

THEMES = load_themes().names()


class Host(App):
    def __init__(self, theme: str) -> None:
        self.themes = load_themes()
        self.wanted = theme
        super().__init__()

    def get_theme_variable_defaults(self) -> dict[str, str]:
        return self.themes.variable_defaults()

    def compose(self) -> ComposeResult:
        yield Static("x")

    def on_mount(self) -> None:
        register_themes(self, self.themes)
        self.theme = self.wanted


@pytest.mark.parametrize("theme", sorted(THEMES))
async def test_every_confidence_shade_reads_at_aa_on_every_theme(theme):
    app = Host(theme)
    async with app.run_test() as pilot:
        await pilot.pause()
        styles = band_styles(app.query_one(Static))
        assert len(styles) == len(BANDS)
        for style, (_, label) in zip(styles, BANDS):
            text, shade = (Color.from_rich_color(c) for c in (style.color, style.bgcolor))
            assert contrast(text, shade) >= READABLE, (theme, label, contrast(text, shade))
