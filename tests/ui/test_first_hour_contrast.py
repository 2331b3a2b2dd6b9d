"""Every confidence shade is readable on every shipped theme (WCAG AA, 4.5:1): synthwave's
"below 10%" shade gave white text 3.4:1."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from textual.color import Color
from textual.widgets import Static

from chatapp.engine.sampling import BANDS
from chatapp.ui.themes import load_themes
from chatapp.ui.widgets.confidence import band_styles
from chatapp.ui.widgets.paint import READABLE, contrast
from tests.ui.widgets.hosts import Host

THEMES = load_themes(user_dir=Path(os.devnull)).names()
"""The shipped themes only: read at collection time, before isolated_env moves the config folder."""


@pytest.mark.parametrize("theme", sorted(THEMES))
async def test_every_confidence_shade_reads_at_aa_on_every_theme(theme):
    sample = Static("x")
    app = Host(load_themes(), sample)
    async with app.run_test() as pilot:
        app.theme = theme
        await pilot.pause()
        styles = band_styles(sample)
        assert len(styles) == len(BANDS)
        for style, (_, label) in zip(styles, BANDS):
            text, shade = (Color.from_rich_color(c) for c in (style.color, style.bgcolor))
            assert contrast(text, shade) >= READABLE, (theme, label, contrast(text, shade))
