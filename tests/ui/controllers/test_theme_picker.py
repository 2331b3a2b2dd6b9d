"""The theme controller (chatapp.ui.controllers.theme_picker) on a small host App: the picker
previews the highlighted theme, Esc puts the old one back and keeps nothing, and a chosen theme
is kept for the next start (the app's side, with the panels' colours: tests/ui/test_app.py)."""

from __future__ import annotations

from textual.command import CommandPalette

from chatapp import paths
from chatapp.config import load_settings
from chatapp.ui.controllers.theme_picker import ThemeController
from chatapp.ui.themes import DEFAULT_THEME, load_themes
from tests.ui._helpers import Messages, notified, wait_until
from tests.ui.controllers.small_host import Host


class ThemeHost(Host):
    """Passes the palette's events to the controller, as ChatApp does."""

    def on_command_palette_option_highlighted(self, event: CommandPalette.OptionHighlighted) -> None:
        self.controller.preview(event)

    def on_command_palette_closed(self, event: CommandPalette.Closed) -> None:
        self.controller.closed(event)


async def test_the_picker_previews_esc_restores_and_a_choice_is_kept(engine, tmp_path):
    themes = load_themes(user_dir=tmp_path / "none")
    host, seen = ThemeHost(engine, ThemeController, theme_result=themes), Messages()
    try:
        async with host.run_test(size=(100, 30), message_hook=seen) as pilot:
            assert host.theme == DEFAULT_THEME
            host.controller.pick()
            await wait_until(pilot, lambda: isinstance(host.screen, CommandPalette), 5)
            await pilot.press(*"synthwave")
            await pilot.pause(0.3)
            await pilot.press("down")
            await wait_until(pilot, lambda: host.theme == "chatapp-synthwave", 5)  # previewed, not yet chosen
            await pilot.press("escape")
            await wait_until(pilot, lambda: host.theme == DEFAULT_THEME, 5)
            assert not paths.config_file().exists()  # a preview is not a choice

            host.controller.pick()
            await wait_until(pilot, lambda: isinstance(host.screen, CommandPalette), 5)
            await pilot.press(*"chatapp-light")
            await pilot.pause(0.3)
            await pilot.press("enter")
            await wait_until(pilot, lambda: host.theme == "chatapp-light", 5)
            await notified(pilot, seen, lambda n: n.title == "Theme" and "saved as the theme" in n.message)
            assert load_settings().theme == "chatapp-light"
    finally:
        host.gate.release(lambda e: [], timeout=5)
