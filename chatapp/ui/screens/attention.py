"""F9: which earlier tokens a reply token attended to, per layer, as a heat strip over the turn.

The weights are llama.cpp's own, read from a replay of the last turn (chatapp.engine.inside.attention),
which the screen asks for through a function the app gives it, on a thread worker. Whatever
cannot be captured is said in words; nothing is drawn that llama.cpp did not compute.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import numpy as np
from rich.style import Style
from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.message import Message

from chatapp.engine.inside.attention import AttentionMap, AttentionUnavailable
from chatapp.engine.tokens import Token
from chatapp.errors import ChatappError
from chatapp.ui.screens.dialog import Dialog
from chatapp.ui.widgets.paint import ThemedPanel, blend, fg, legend, shown_piece

Capture = Callable[[int | None, threading.Event], tuple[AttentionMap | AttentionUnavailable, list[Token]]]
"""`capture(head_layer, stop)`: the last turn's attention and its tokens' pieces (blocking)."""
WINDOW = 1000
"""Tokens drawn at most, as in the Tokens panel."""
TOP = 5
"""The most attended tokens listed with their weights."""
SCALES = ("sqrt", "linear")
HEAT_LOW, HEAT_HIGH = ("token-a", "token-b"), "accent"
"""Zero weight keeps the Tokens panel's alternating shades; full weight is the theme's accent."""


class AttentionView(ThemedPanel):
    """One query row drawn: what is chosen, the scale, the most attended tokens, the strip."""

    DEFAULT_CSS = "AttentionView { height: auto; }"

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.map: AttentionMap | None = None
        self.tokens: list[Token] = []
        self.problem: str | None = None
        self.pending: str | None = "replaying the last turn to read its attention…"
        self.query_position = 0
        self.chosen_layer = 0
        self.chosen_head: int | None = None
        """None: the layer's heads averaged."""
        self.scale = SCALES[0]

    def draw(self, width: int) -> Text:
        lines: list[Text] = []
        if self.problem:
            lines.append(Text(self.problem, style=fg(self, "warning")))
        if self.map is None:
            if self.pending:
                lines.append(Text(self.pending, style="italic"))
            return Text("\n").join(lines)
        weights = self.weights()
        lines += self._choice() + [self._legend(float(weights.max()), width), self._top(weights), Text("")]
        lines.append(self.strip())
        lines += [Text(""), *self._notes(weights)]
        if self.pending:
            lines.append(Text(self.pending, style="italic"))
        return Text("\n").join(lines)

    def weights(self) -> np.ndarray:
        return self.map.weights(self.query_position, self.chosen_layer, self.chosen_head)

    def _choice(self) -> list[Text]:
        m, label = self.map, fg(self, "primary", bold=True)
        at, head = self.query_position, self.chosen_head
        piece = shown_piece(self.tokens[at].piece) if at < len(self.tokens) else "?"
        query = Text.assemble(("query  ", label), (f"{piece!r}", "bold"),
                              f" · reply token {at - m.reply_start + 1} of {m.reply_tokens} · position {at:,}")
        heads = m.n_heads.get(self.chosen_layer, 0)
        which = f"heads averaged ({heads})" if head is None else f"head {head + 1} of {heads}"
        layer = Text.assemble(("layer  ", label), f"{self.chosen_layer + 1} of {m.mean.shape[0]} · {which}")
        return [query, layer]

    def _share(self, weight: float, top: float) -> float:
        if top <= 0:
            return 0.0
        share = max(weight, 0.0) / top
        return float(np.sqrt(share)) if self.scale == "sqrt" else share

    def _legend(self, top: float, width: int) -> Text:
        steps = (0.0, 0.25, 0.5, 0.75, 1.0)
        entries = []
        for step in steps:
            weight = top * (step * step if self.scale == "sqrt" else step)
            entries.append(Text.assemble(("  ", blend(self, HEAT_LOW[0], HEAT_HIGH, step)), f" {weight:.3f}"))
        name = "√(weight / largest)" if self.scale == "sqrt" else "weight / largest"
        head = Text.assemble(("scale  ", fg(self, "primary", bold=True)), f"colour = {name} ")
        return Text.assemble(head, legend(entries, max(width - head.cell_len, 10)))

    def _top(self, weights: np.ndarray) -> Text:
        order = np.argsort(weights, kind="stable")[::-1][:TOP]
        out = Text.assemble((f"top {TOP}  ", fg(self, "primary", bold=True)))
        for n, pos in enumerate(order):
            piece = shown_piece(self.tokens[pos].piece) if pos < len(self.tokens) else "?"
            out.append(" · " if n else "")
            out.append(f"{piece!r}", style="bold")
            out.append(f"@{pos} {weights[pos]:.3f}")
        return out

    def window(self) -> range:
        """Positions drawn: the last WINDOW, or WINDOW around the query when it lies earlier."""
        n = len(self.tokens)
        start = max(0, min(n - WINDOW, self.query_position - WINDOW // 2))
        return range(start, min(n, start + WINDOW))

    def strip(self) -> Text:
        """The turn's tokens (the window of them), each in the heat of its weight for the query."""
        weights = self.weights()
        top, out = float(weights.max()), Text()
        special = Style(bold=True)
        for pos in self.window():
            token = self.tokens[pos]
            if pos <= self.query_position:
                style = blend(self, HEAT_LOW[pos % 2], HEAT_HIGH, self._share(float(weights[pos]), top))
                if pos == self.query_position:
                    style += Style(reverse=True, bold=True, underline=True)
            else:  # not yet written when this token was computed: the causal mask gives it nothing
                style = blend(self, HEAT_LOW[pos % 2], HEAT_HIGH, 0.0) + Style(dim=True, italic=True)
            if token.special:
                style += special
            out.append(shown_piece(token.piece) or "∅", style=style)
        return out

    def _notes(self, weights: np.ndarray) -> list[Text]:
        m, notes = self.map, []
        shown = self.window()
        outside = float(weights[: shown.start].sum())
        if shown.start:
            notes.append(Text(f"{shown.start:,} earlier tokens are not drawn; they hold {outside:.3f} of the weight",
                              style="italic"))
        if m.rows < m.reply_tokens:
            notes.append(Text(f"rows kept for the first {m.rows:,} of {m.reply_tokens:,} reply tokens "
                              "(a memory cap)", style="italic"))
        notes.append(Text(m.how(), style="dim"))
        return notes


class AttentionScreen(Dialog[None]):
    """Asks for the capture on a thread worker when opened, and again for another layer's heads."""

    FRAME_TITLE = "Attention · last turn · Esc closes"
    # Textual markup: "[ and ]" alone reads as a tag and vanished (rich's escape leaves it as is).
    FRAME_SUBTITLE = r"←/→ token · ↑/↓ layer · \[ and ] one head · a averaged · s scale"
    FRAME = VerticalScroll
    BINDINGS = [
        Binding("q", "close", "Close"),  # Esc too (Dialog's), and F9 (the app's binding)
        Binding("left", "token(-1)", "Previous reply token", show=False),
        Binding("right", "token(1)", "Next reply token", show=False),
        Binding("up", "layer(-1)", "Previous layer", show=False),
        Binding("down", "layer(1)", "Next layer", show=False),
        Binding("right_square_bracket", "head(1)", "Next head", show=False,
                tooltip="One head at a time: the next one"),
        Binding("left_square_bracket", "head(-1)", "Previous head", show=False,
                tooltip="One head at a time: the previous one"),
        Binding("a", "average", "Heads averaged", show=False, tooltip="The layer's heads averaged"),
        Binding("s", "scale", "Scale", show=False, tooltip="Colour by √weight or by weight"),
    ]

    DEFAULT_CSS = "AttentionScreen > #dialog { width: 96%; max-width: 140; height: 92%; max-height: 92%; }"

    class Captured(Message):
        def __init__(self, found: AttentionMap | AttentionUnavailable | None, tokens: list[Token],
                     problem: str | None = None) -> None:
            super().__init__()
            self.found, self.tokens, self.problem = found, tokens, problem

    def __init__(self, capture: Capture, *, position: int | None = None, layer: int = 0) -> None:
        super().__init__()
        self._capture = capture
        self._stop = threading.Event()
        self._wanted_position = position
        self._first_layer = layer

    def compose_body(self) -> ComposeResult:
        yield AttentionView(id="attention")

    @property
    def view(self) -> AttentionView:
        return self.query_one(AttentionView)

    def on_mount(self) -> None:
        self.view.chosen_layer = self._first_layer
        self.capture(self._first_layer)

    def on_unmount(self) -> None:
        self._stop.set()  # a replay still running ends at its next graph node

    @work(thread=True, exclusive=True, exit_on_error=False, group="attention")
    def capture(self, head_layer: int | None) -> None:
        try:
            found, tokens = self._capture(head_layer, self._stop)
        except ChatappError as exc:
            self.post_message(self.Captured(None, [], f"no attention: {exc.one_line()}"))
            return
        self.post_message(self.Captured(found, tokens))

    def on_attention_screen_captured(self, message: Captured) -> None:
        view, found = self.view, message.found
        view.pending = None
        if not isinstance(found, AttentionMap):
            view.problem = message.problem or (found.reason if found is not None else "no attention")
            view.redraw()
            return
        first = view.map is None
        view.map, view.tokens, view.problem = found, message.tokens, None
        if first:
            wanted = self._wanted_position
            view.query_position = wanted if wanted in found.positions else found.reply_start
            if view.chosen_layer not in found.layers:
                view.chosen_layer = found.layers[len(found.layers) // 2]
        elif found.head_layer == view.chosen_layer:
            view.chosen_head = 0
        view.redraw()

    # --- choosing -----------------------------------------------------------------------------
    def action_token(self, step: int) -> None:
        view = self.view
        if view.map is not None:
            positions = view.map.positions
            view.query_position = max(positions.start, min(view.query_position + step, positions.stop - 1))
            view.redraw()

    def action_layer(self, step: int) -> None:
        view = self.view
        if view.map is None:
            return
        layers = view.map.layers
        at = layers.index(view.chosen_layer) if view.chosen_layer in layers else 0
        view.chosen_layer = layers[max(0, min(at + step, len(layers) - 1))]
        if view.chosen_head is not None and view.map.head_layer != view.chosen_layer:
            view.chosen_head = None  # that layer's heads one by one are read on the next [ or ]
        view.redraw()

    def action_head(self, step: int) -> None:
        view = self.view
        if view.map is None or view.pending:
            return
        if view.map.head_layer != view.chosen_layer:
            view.pending = f"replaying the turn again to keep layer {view.chosen_layer + 1}'s heads one by one…"
            view.redraw()
            self.capture(view.chosen_layer)
            return
        heads = view.map.n_heads[view.chosen_layer]
        if view.chosen_head is None:
            view.chosen_head = 0 if step > 0 else heads - 1
        else:
            view.chosen_head = (view.chosen_head + step) % heads
        view.redraw()

    def action_average(self) -> None:
        self.view.chosen_head = None
        self.view.redraw()

    def action_scale(self) -> None:
        view = self.view
        view.scale = SCALES[(SCALES.index(view.scale) + 1) % len(SCALES)]
        view.redraw()
