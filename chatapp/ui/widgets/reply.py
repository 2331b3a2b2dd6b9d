"""An assistant reply: Markdown rendered by Rich as one widget, in the app theme's colours.

Textual's Markdown widget mounts a widget per block (about 16 per reply of the default
model), and each layout places every widget on the screen, so streaming cost more the longer
the chat grew: by turn 31 the transcript held ~500 widgets and the UI thread spent 80% of a
core on a turn, CPU that the decode thread waited for. With one widget per reply the UI
thread stays at about 30% whatever the length (benchmarks/tui_long_chat.py).
"""

from __future__ import annotations

from rich.console import Console, ConsoleOptions, RenderableType, RenderResult
from rich.markdown import Markdown
from rich.style import Style
from rich.theme import Theme
from textual.widget import Widget

from chatapp.ui.widgets.paint import theme_colour


class Themed:
    """Render a Rich renderable with a Rich theme pushed, so its named styles
    (`markdown.h1`, `markdown.code`, ...) resolve to the app theme's colours."""

    def __init__(self, renderable: RenderableType, theme: Theme) -> None:
        self.renderable, self.theme = renderable, theme

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        with console.use_theme(self.theme):
            segments = list(console.render(self.renderable, options))
        yield from segments


def markdown_theme(widget: Widget) -> Theme:
    """Rich's Markdown styles from the Textual theme, after Textual's own Markdown widget."""
    variables = widget.app.theme_variables

    def colour(name: str, **attrs) -> Style:
        return Style(color=theme_colour(widget, name), **attrs)

    styles = {
        "markdown.code": colour("text-accent", bold=True),
        "markdown.block_quote": colour("text-secondary", italic=True),
        "markdown.link": colour("text-primary", underline=True),
        "markdown.link_url": colour("text-primary"),
        "markdown.item.bullet": colour("accent", bold=True),
        "markdown.item.number": colour("accent", bold=True),
        "markdown.hr": colour("secondary"),
        "markdown.h1.border": colour("markdown-h1-color"),
    }
    for level in range(1, 7):
        text_style = variables.get(f"markdown-h{level}-text-style", "bold")
        styles[f"markdown.h{level}"] = Style.parse(text_style) + colour(f"markdown-h{level}-color")
    return Theme(styles, inherit=True)


class Reply(Widget):
    DEFAULT_CSS = """
    Reply { height: auto; }
    """

    def __init__(self, text: str = "") -> None:
        super().__init__(classes="message")
        self.border_title = "assistant"
        self.source = text
        """The Markdown shown: the reply so far while it streams."""
        self._theme: tuple[str, Theme] | None = None

    def on_mount(self) -> None:
        self.app.theme_changed_signal.subscribe(self, lambda _theme: self.refresh(layout=True))

    def render(self) -> Themed:
        name = self.app.theme
        if self._theme is None or self._theme[0] != name:
            self._theme = (name, markdown_theme(self))
        code_theme = "monokai" if self.app.current_theme.dark else "friendly"
        return Themed(Markdown(self.source, code_theme=code_theme), self._theme[1])

    def show(self, text: str) -> None:
        """Show `text`, the reply so far while it streams or the whole reply at the end."""
        if text != self.source:
            self.source = text
            self.refresh(layout=True)
