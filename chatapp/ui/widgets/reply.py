"""An assistant reply: Markdown rendered by Rich, in the app theme's colours, drawn line by line.

While a reply streams, only its tail changes. The widget keeps the rendered lines of the
finished blocks (everything up to the last blank line outside a code fence) and renders just
the tail block on each update; it repaints only the lines that changed, and asks for a new
layout only when it needs more rows than it has (it grows in steps of STREAM_STEP rows while
streaming). A full layout places every widget and repaints the whole screen, and on a 2-core
machine the UI thread's CPU is taken from decode (benchmarks/tui_vs_llama_cli.py). When the
reply is complete it is rendered once more as one document, so what stays on screen is
exactly Rich's rendering of the whole reply.
"""

from __future__ import annotations

from rich.markdown import Markdown
from rich.segment import Segment
from rich.style import Style
from rich.theme import Theme
from textual.geometry import Offset, Region, Size
from textual.strip import Strip
from textual.widget import Widget

from chatapp.format import visible_text
from chatapp.engine.sampling import TokenProbs
from chatapp.ui.widgets.confidence import shaded_reply
from chatapp.ui.widgets.paint import theme_colour

STREAM_STEP = 6
"""Rows a streaming reply grows by at a time: one layout per STREAM_STEP new lines."""


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


def split_finished(text: str) -> tuple[str, str]:
    """(finished blocks, the block still being written): cut at the last blank line that is
    outside a code fence and before the tail."""
    cut, fence, at = -1, False, 0
    for line in text.splitlines(keepends=True):
        stripped = line.strip()
        if stripped.startswith(("```", "~~~")):
            fence = not fence
        elif not stripped and not fence and at > 0:
            cut = at
        at += len(line)
    if cut <= 0:
        return "", text
    return text[:cut].rstrip("\n"), text[cut:].lstrip("\n")


class Reply(Widget):
    DEFAULT_CSS = """
    Reply { height: auto; }
    """

    message_id = ""
    """Its id in the conversation tree ("" while it is being written); see chatapp.ui.widgets.transcript."""
    position = siblings = 1

    def __init__(self, text: str = "") -> None:
        super().__init__(classes="message")
        self.border_title = "assistant"
        self.source = text
        """The Markdown shown: the reply so far while it streams."""
        self.streaming = False
        """Set by the transcript while the reply streams: render the tail alone, grow in steps."""
        self._theme: tuple[str, Theme] | None = None
        self._lines: list[Strip] = []
        self._key: tuple | None = None
        self._finished: tuple[tuple, list[Strip], bool] | None = None
        """(key, lines, ends with a rule) of the finished blocks while streaming."""
        self.probs: tuple[TokenProbs, ...] = ()
        """The finished reply's tokens with their probabilities, when the turn computed them."""
        self.confidence = False
        """Show the reply as its tokens shaded by probability (the confidence view) when it can."""

    def on_mount(self) -> None:
        self.app.theme_changed_signal.subscribe(self, lambda _theme: self._restyle())

    def _restyle(self) -> None:
        self._key = self._finished = None
        self.refresh(layout=True)

    # --- rendering ---------------------------------------------------------------------------
    def _markdown_theme(self) -> Theme:
        name = self.app.theme
        if self._theme is None or self._theme[0] != name:
            self._theme = (name, markdown_theme(self))
        return self._theme[1]

    def _render_markdown(self, text: str, width: int) -> tuple[list[Strip], bool]:
        """Rich's lines for `text`, and whether it ends with a horizontal rule (Rich puts no
        blank line after one)."""
        console = self.app.console
        code_theme = "monokai" if self.app.current_theme.dark else "friendly"
        # the one door of a reply into Rich: what the model wrote is shown, its escapes never obeyed
        markdown = Markdown(visible_text(text), code_theme=code_theme)
        options = console.options.update(width=width, height=None)
        with console.use_theme(self._markdown_theme()):
            lines = console.render_lines(markdown, options, style=self.rich_style, pad=True)
        ends_with_rule = bool(markdown.parsed) and markdown.parsed[-1].type == "hr"
        return [Strip(line, width) for line in lines], ends_with_rule

    def _lines_for(self, width: int) -> list[Strip]:
        width = max(width, 1)
        key = (self.source, width, self.app.theme, self.streaming, self.confidence and bool(self.probs))
        if key == self._key:
            return self._lines
        shaded = shaded_reply(self, self.source, self.probs) if self.confidence and not self.streaming else None
        if shaded is not None:
            options = self.app.console.options.update(width=width, height=None)
            self._lines = [Strip(line, width) for line in self.app.console.render_lines(
                shaded, options, style=self.rich_style, pad=True)]
            self._finished = None
        elif not self.streaming:
            self._lines, _ = self._render_markdown(self.source, width)
            self._finished = None
        else:
            done, tail = split_finished(self.source)
            done_key = (done, width, self.app.theme)
            if self._finished is None or self._finished[0] != done_key:
                self._finished = (done_key, *self._render_markdown(done, width)) if done else (done_key, [], True)
            _, done_lines, ends_with_rule = self._finished
            tail_lines = self._render_markdown(tail, width)[0] if tail else []
            gap = [] if ends_with_rule or not done_lines or not tail_lines else \
                [Strip([Segment(" " * width, self.rich_style)], width)]
            self._lines = done_lines + gap + tail_lines
        self._key = key
        return self._lines

    def _rows(self, width: int) -> int:
        rows = len(self._lines_for(width))
        if self.streaming:
            rows = -(-max(rows, 1) // STREAM_STEP) * STREAM_STEP
        return max(rows, 1)

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        return self._rows(width)

    def render_line(self, y: int) -> Strip:
        lines = self._lines_for(self.size.width)
        if 0 <= y < len(lines):
            return lines[y]
        return Strip.blank(self.size.width, self.rich_style)

    def step_position(self, step: int) -> Offset | None:
        """Where reply token `step` (its index among the tokens with probabilities) starts in the
        drawn reply, in content cells; None while the reply is not drawn shaded."""
        for y, line in enumerate(self._lines_for(self.size.width)):
            x = 0
            for segment in line:
                if segment.style is not None and segment.style.meta.get("step") == step:
                    return Offset(x, y)
                x += segment.cell_length
        return None

    @property
    def shaded(self) -> bool:
        """The reply is drawn as its tokens shaded by probability (the confidence view)."""
        return self.confidence and not self.streaming and shaded_reply(self, self.source, self.probs) is not None

    # --- updates -----------------------------------------------------------------------------
    def show_probs(self, probs: tuple[TokenProbs, ...]) -> None:
        """Probabilities that came after the reply was drawn (it was scored)."""
        self.probs = probs
        self._key = None
        self.refresh(layout=True)

    def show_confidence(self, on: bool) -> None:
        """The confidence view on or off for this reply (it shades only a reply with probabilities)."""
        if on != self.confidence:
            self.confidence = on
            self.refresh(layout=True)

    def show(self, text: str, *, streaming: bool | None = None) -> None:
        """Show `text`, the reply so far while it streams or the whole reply at the end."""
        streaming = self.streaming if streaming is None else streaming
        if text == self.source and streaming == self.streaming:
            return
        width = self.size.width
        if not self.is_mounted or not width:
            self.source, self.streaming = text, streaming
            self.refresh(layout=True)
            return
        old, old_rows = list(self._lines_for(width)), self._rows(width)
        self.source, self.streaming = text, streaming
        new = self._lines_for(width)
        if self._rows(width) != old_rows:
            self.refresh(layout=True)
            return
        first = next((i for i, (a, b) in enumerate(zip(old, new)) if a != b), min(len(old), len(new)))
        last = max(len(old), len(new))
        if first < last:
            self.refresh(Region(0, first, width, last - first))
