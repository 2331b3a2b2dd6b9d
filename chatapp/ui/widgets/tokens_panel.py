"""Tokens: the composer's text as the tokenizer cuts it, or the last turn's prompt as the model saw it."""

from __future__ import annotations

from rich.style import Style
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.reactive import reactive
from textual.widgets import Static

from chatapp.engine.prompt_view import PromptToken
from chatapp.engine.tokens import Token
from chatapp.format import count, visible_piece
from chatapp.ui.widgets.paint import Sketch, bg, fg, legend, swatch

WINDOW = 1000
"""Tokens drawn at most; a longer text shows its last WINDOW tokens."""
ORIGINS = ("cached", "prefilled", "generated")
ORIGIN_COLOURS = {"cached": "token-cached", "prefilled": "token-prefill", "generated": "token-generated"}
_SUBSCRIPT = str.maketrans("0123456789", "₀₁₂₃₄₅₆₇₈₉")


class TokensPanel(VerticalScroll):
    DEFAULT_CSS = """
    TokensPanel {
        height: 1fr;
        min-height: 5;
        border: round $panel-lighten-2;
        border-title-color: $text-muted;
        padding: 0 1;
        scrollbar-size-vertical: 1;
    }
    TokensPanel #tokens-summary { height: auto; margin-bottom: 1; }
    TokensPanel #tokens-pieces { height: auto; }
    """

    mode: reactive[str] = reactive("composer", always_update=True)
    """"composer" (the text being typed) or "turn" (the last turn's prompt)."""
    show_ids: reactive[bool] = reactive(False)
    """Show each token's id after its piece."""

    def __init__(self, *, name: str | None = None, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(name=name, id=id, classes=classes)
        self.border_title = "Tokens"
        self.composer_tokens: list[Token] = []
        self.turn_view: list[PromptToken] = []
        self.reuse_broken_at: int | None = None

    def compose(self) -> ComposeResult:
        yield Sketch(self._summary, id="tokens-summary")
        yield Static(id="tokens-pieces")

    def on_mount(self) -> None:
        self.app.theme_changed_signal.subscribe(self, lambda _theme: self._paint())
        self._paint()

    # --- what the shell calls ---------------------------------------------------------
    def show_composer(self, tokens: list[Token]) -> None:
        """The composer's tokens; typing switches back to this view (an empty composer doesn't)."""
        self.composer_tokens = tokens
        if tokens or not self.turn_view:
            self.mode = "composer"
        elif self.mode == "composer":
            self._paint()

    def show_turn(self, view: list[PromptToken], reuse_broken_at: int | None) -> None:
        self.turn_view, self.reuse_broken_at = view, reuse_broken_at
        self.mode = "turn"

    def reset(self) -> None:
        """A different conversation: the last turn's view no longer describes the cache."""
        self.turn_view, self.reuse_broken_at = [], None
        self.mode = "composer"
        self._paint()

    def toggle_ids(self) -> None:
        self.show_ids = not self.show_ids

    def toggle_mode(self) -> None:
        self.mode = "composer" if self.mode == "turn" else "turn"

    def validate_mode(self, mode: str) -> str:
        return mode if mode in ("composer", "turn") else "composer"

    def watch_mode(self) -> None:
        self._paint()
        if self.mode == "composer":
            self.scroll_end(animate=False)  # the cursor is usually at the end
        else:
            self.scroll_home(animate=False)

    def watch_show_ids(self) -> None:
        self._paint()

    # --- drawing ------------------------------------------------------------------------
    def _paint(self) -> None:
        if not self.is_mounted:
            return
        self.query_one("#tokens-summary", Sketch).redraw()
        pieces = self._composer_pieces() if self.mode == "composer" else self._turn_pieces()
        self.query_one("#tokens-pieces", Static).update(pieces)

    def _summary(self, width: int) -> Text:
        if self.mode == "composer":
            tokens = self.composer_tokens
            chars = sum(len(t.piece) for t in tokens)
            lines = [Text(f"composer · {count(len(tokens))} tokens · {count(chars)} chars")]
        elif not self.turn_view:
            return Text("no turn yet", style="italic")
        else:
            lines = self._turn_summary(width)
        shown = len(self.composer_tokens if self.mode == "composer" else self.turn_view)
        if shown > WINDOW:
            lines.append(Text(f"showing the last {count(WINDOW)}", style="italic"))
        return Text("\n").join(lines)

    def _composer_pieces(self) -> Text:
        tokens = self.composer_tokens
        start = max(len(tokens) - WINDOW, 0)
        plain = [bg(self, "token-a"), bg(self, "token-b")]
        special = [s + fg(self, "token-special", bold=True) for s in plain]
        pieces = Text()
        for i in range(start, len(tokens)):
            token = tokens[i]
            self._append(pieces, token, (special if token.special else plain)[i % 2])
        return pieces

    def _turn_summary(self, width: int) -> list[Text]:
        view, broken = self.turn_view, self.reuse_broken_at
        tally = dict.fromkeys(ORIGINS, 0)
        for item in view:
            tally[item.origin] += 1
        entries = [swatch(f"{name} {count(tally[name])}", fg(self, ORIGIN_COLOURS[name])) for name in ORIGINS]
        entries.append(swatch("special", fg(self, "token-special")))
        retrieved = sum(1 for item in view if item.role == "retrieved")
        if retrieved:  # attachment text: its own shade behind whichever origin colour it has
            entries.append(Text.assemble(("  ", bg(self, "token-retrieved-a")), f" retrieved {count(retrieved)}"))
        lines = [Text(f"last turn · {count(len(view))} tokens in the cache"), legend(entries, width)]
        if broken is not None and broken < len(view):
            lines.append(Text(f"▶ prefix reuse broke at token {count(broken)}: "
                              f"{visible_piece(view[broken].token.piece)!r}", style=fg(self, "warning")))
        return lines

    def _turn_pieces(self) -> Text:
        view, broken = self.turn_view, self.reuse_broken_at
        origin = {name: fg(self, ORIGIN_COLOURS[name]) for name in ORIGINS}
        backgrounds = [bg(self, "token-a"), bg(self, "token-b")]
        retrieved = [bg(self, "token-retrieved-a"), bg(self, "token-retrieved-b")]
        special = fg(self, "token-special", bold=True)
        pieces = Text()
        for i in range(max(len(view) - WINDOW, 0), len(view)):
            item = view[i]
            shade = retrieved if item.role == "retrieved" else backgrounds
            style = shade[i % 2] + (special if item.token.special else origin[item.origin])
            if item.role == "template" and not item.token.special:
                style += Style(italic=True)
            if i == broken:
                pieces.append("▶", style=fg(self, "warning", bold=True, reverse=True))
                style += Style(underline=True)
            self._append(pieces, item.token, style)
        return pieces

    def _append(self, pieces: Text, token: Token, style: Style) -> None:
        pieces.append(visible_piece(token.piece) or "∅", style=style)
        if self.show_ids:
            pieces.append(str(token.id).translate(_SUBSCRIPT), style=style + Style(dim=True))

