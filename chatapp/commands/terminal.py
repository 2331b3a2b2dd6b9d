"""The one Rich console the commands print with: text from outside never reaches the terminal
as a control sequence.

Rich turns every string it prints (a print's argument, a table's cell, title and caption) into
Text through `Console.render_str`, after the markup in it is parsed. Each control character in
that string came from outside (chatapp's own markup and styles hold none), so showing them there
(chatapp.format.visible_text) guards every command at once, an unescaped value included. Markup
in outside text is still each caller's to escape (rich.markup.escape), as Rich can't tell it
from chatapp's own; a renderable built as Text is the caller's too (chatapp.format.visible_text).
"""

from __future__ import annotations

from rich.console import Console
from rich.text import Text

from chatapp.format import visible_text


class SafeConsole(Console):
    """rich.console.Console whose strings have their control characters shown (visible_text)."""

    def render_str(self, text: str, **options) -> Text:
        return super().render_str(visible_text(text), **options)

    @property
    def draws_colour(self) -> bool:
        """False when piped or NO_COLOR is set: what a style alone says must then be said in text."""
        return self.color_system is not None and not self.no_color
