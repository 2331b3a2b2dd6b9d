"""Rich pieces the panels draw with: theme colours, stacked bars, legend swatches.

Colours come from the running theme's variables, so a panel repaints when the theme changes
(see `ThemedPanel`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from rich.console import Console, ConsoleOptions, RenderResult
from rich.color import Color as RichColor
from rich.style import Style
from rich.text import Text
from textual.color import Color, ColorParseError
from textual.widget import Widget

from chatapp.format import visible_piece, visible_text


def shown_piece(piece: str) -> str:
    """A token's text as the panels draw it: whitespace made visible (visible_piece), and every
    other control character as its escape, since attached files and replies can hold escape
    sequences that would otherwise reach the terminal (set its title, its clipboard)."""
    return visible_text(visible_piece(piece))


def theme_colour(widget: Widget, name: str) -> RichColor:
    """A theme variable's colour; the foreground when a theme lacks it.

    Parsed through Textual so ANSI themes' names (ansi_blue) become colours Rich knows.
    """
    colour = _textual_colour(widget, name)
    return RichColor.default() if colour is None else colour.rich_color


def _textual_colour(widget: Widget, name: str) -> Color | None:
    variables = widget.app.theme_variables
    value = variables.get(name) or variables.get("foreground", "default")
    try:
        return Color.parse(value)
    except ColorParseError:
        return None


READABLE = 4.5
"""WCAG AA's contrast for text: every shade the heat scale draws text on reaches it."""
_BLACK, _WHITE = Color(0, 0, 0), Color(255, 255, 255)


def contrast(a: Color, b: Color) -> float:
    """WCAG 2's contrast ratio of two colours."""

    def luminance(colour: Color) -> float:
        channels = [c / 255 for c in colour.rgb]
        r, g, b = (c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4 for c in channels)
        return 0.2126 * r + 0.7152 * g + 0.0722 * b

    high, low = sorted((luminance(a), luminance(b)), reverse=True)
    return (high + 0.05) / (low + 0.05)


def blend(widget: Widget, low: str, high: str, share: float, **attrs) -> Style:
    """A background `share` (0 to 1) of the way from theme colour `low` to `high`, with text in
    whichever of black or white reads better on it (a heat scale). A shade on which neither
    reaches READABLE (synthwave's error pink gave white text 3.4:1) is darkened, or lightened
    for black text, until it does."""
    start, end = _textual_colour(widget, low), _textual_colour(widget, high)
    if start is None or end is None:
        return Style(**attrs)
    mixed = start.blend(end, max(0.0, min(share, 1.0)))
    text = max((_BLACK, _WHITE), key=lambda candidate: contrast(candidate, mixed))
    for _ in range(20):
        if contrast(text, mixed) >= READABLE:
            break
        mixed = mixed.darken(0.03) if text is _WHITE else mixed.lighten(0.03)
    return Style(bgcolor=mixed.rich_color, color=text.rich_color, **attrs)


def fg(widget: Widget, name: str, **attrs) -> Style:
    return Style(color=theme_colour(widget, name), **attrs)


def bg(widget: Widget, name: str, **attrs) -> Style:
    return Style(bgcolor=theme_colour(widget, name), **attrs)


class Drawing:
    """A Rich renderable that asks its panel to draw itself at the width it is given."""

    def __init__(self, panel: "ThemedPanel") -> None:
        self.panel = panel

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        yield self.panel.drawn(options.max_width)


class ThemedPanel(Widget):
    """A panel drawn as one Rich Text from its data and width, redrawn when the data, the
    width or the theme change."""

    def __init__(self, *, name: str | None = None, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(name=name, id=id, classes=classes)
        self._drawn: tuple[int, Text] | None = None

    def on_mount(self) -> None:
        self.app.theme_changed_signal.subscribe(self, self._theme_changed)

    def _theme_changed(self, _theme) -> None:
        self.redraw()

    def redraw(self) -> None:
        """Draw again after the data changes; the screen lays out again only if the height changed.

        Live updates arrive many times a second, and a layout costs more than a repaint.
        """
        before, self._drawn = self._drawn, None
        width = self.content_size.width
        if before is None or before[0] != width:
            self.refresh(layout=True)
            return
        self.refresh(layout=self._height(before[1], width) != self._height(self.drawn(width), width))

    def _height(self, text: Text, width: int) -> int:
        return len(text.wrap(self.app.console, width))

    def render(self) -> Drawing:
        return Drawing(self)

    def drawn(self, width: int) -> Text:
        width = max(width, 1)
        if self._drawn is None or self._drawn[0] != width:
            self._drawn = (width, self.draw(width))
        return self._drawn[1]

    @property
    def plain(self) -> str:
        """The panel's text as it is on screen now, without styles."""
        return self.drawn(self.content_size.width or 40).plain

    def draw(self, width: int) -> Text:
        raise NotImplementedError


class Sketch(ThemedPanel):
    """A ThemedPanel drawn by its owner's function of the width, for parts of a bigger panel."""

    def __init__(self, draw: Callable[[int], Text], *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self._draw = draw

    def draw(self, width: int) -> Text:
        return self._draw(width)


def fit(main: str, detail: str, width: int, indent: int = 2) -> Text:
    """`main (detail)` on one line when it fits in `width`, else the detail on a line of its own."""
    if len(main) + len(detail) + 3 <= width:
        return Text(f"{main} ({detail})")
    return Text(f"{main}\n{' ' * indent}({detail})")


UNDER_ONE_CELL = "▌"
"""A segment too small for a cell of its own, drawn in one so that it shows: half a block, so it
does not read as a full cell's share (75 of 4,096 cells in four roles drew as 4 of 67 cells)."""


def stacked_bar(segments: Sequence[tuple[float, Style]], total: float, width: int, empty: Style) -> Text:
    """A one-line bar `width` cells wide; each segment gets cells in proportion to its size.

    Cells go by largest remainder, so the filled cells match the filled share, and a
    non-empty segment shows at least one cell while there is room: UNDER_ONE_CELL where that
    cell is more than its share.
    """
    width = max(width, 1)
    if total <= 0:
        return Text("░" * width, style=empty)
    shares = [max(size, 0) * width / total for size, _ in segments]
    filled = min(width, round(sum(shares)))
    cells = [int(s) for s in shares]
    for i in sorted(range(len(shares)), key=lambda i: shares[i] - cells[i], reverse=True):
        if sum(cells) >= filled:
            break
        cells[i] += 1
    lifted = set()
    for i, share in enumerate(shares):
        if share > 0 and cells[i] == 0 and sum(cells) < width:
            cells[i] = 1
            lifted.add(i)
    bar = Text()
    for i, (n, (_, style)) in enumerate(zip(cells, segments)):
        bar.append(UNDER_ONE_CELL if i in lifted else "█" * n, style=style)
    bar.append("░" * (width - sum(cells)), style=empty)
    return bar


def swatch(label: str, style: Style) -> Text:
    """A legend entry: a coloured block, then its label."""
    return Text.assemble(("■ ", style), label)


def legend(entries: Sequence[Text], width: int) -> Text:
    """Legend entries, as many to a line as fit in `width` cells."""
    out, line_len = Text(), 0
    for entry in entries:
        gap = 2 if line_len else 0
        if line_len and line_len + gap + entry.cell_len > width:
            out.append("\n")
            line_len, gap = 0, 0
        out.append(" " * gap)
        out.append_text(entry)
        line_len += gap + entry.cell_len
    return out
