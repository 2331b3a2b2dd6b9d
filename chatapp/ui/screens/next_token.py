"""Inside the next token: the conversation shaded by surprise, the logit lens of a reply token,
and the sampler chain stage by stage (chatapp.engine.inside.{surprise,lens,sampler_chain}).

The numbers come from a replay on the loaded model, which the screen asks for through a function
the controller gives it, on a thread worker; ←/→ move to another reply token (lens and sampler).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Literal

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.message import Message

from chatapp.engine.inside.lens import Lens
from chatapp.engine.inside.sampler_chain import ChainReplay
from chatapp.engine.inside.surprise import KLD_LABELS, KLD_SHADES, SHADE_LABELS, QuantCost, Surprise, shade
from chatapp.errors import ChatappError
from chatapp.ui.screens.dialog import Dialog
from chatapp.ui.widgets.paint import ThemedPanel, bg, fg, legend, shown_piece, stacked_bar, swatch

Kind = Literal["surprise", "lens", "sampler", "quant"]
Found = Surprise | Lens | ChainReplay | QuantCost | str
Compute = Callable[[int | None, threading.Event], Found]
"""`compute(index, stop)`: the view's numbers (index: the reply token, 0 the first; None the
default), or one line saying why there are none (blocking)."""

WHAT: dict[str, str] = {
    "surprise": "Each token in the cache, shaded by its surprise: -ln p, how unlikely the model found it there.",
    "lens": "Layer by layer, the next token each layer's output would pick, through the final norm and output head.",
    "sampler": "What each sampler of the chain left of a reply token's candidates, in llama.cpp's order.",
    "quant": "Each token in the cache, shaded by how far a second quant's next-token probabilities are from the "
             "loaded model's (KL divergence), with both files' sizes and speeds.",
}
TITLES = {"surprise": "Surprise · the conversation", "lens": "Logit lens · a reply token",
          "sampler": "Sampler chain · a reply token", "quant": "Quantization cost · the conversation"}


class NextTokenView(ThemedPanel):
    DEFAULT_CSS = "NextTokenView { height: auto; }"

    def __init__(self, kind: Kind, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.kind = kind
        self.found: Surprise | Lens | ChainReplay | QuantCost | None = None
        self.problem: str | None = None
        self.pending: str | None = "replaying the turn on the loaded model…"
        self.index = 0
        """The sampler chain's shown reply token."""

    def draw(self, width: int) -> Text:
        lines = [Text(WHAT[self.kind], style="italic")]
        if self.problem:
            lines.append(Text(self.problem, style=fg(self, "warning")))
        if self.pending:
            lines.append(Text(self.pending, style="italic"))
        found = self.found
        if isinstance(found, Surprise):
            lines += self._surprise(found, width)
        elif isinstance(found, QuantCost):
            lines += self._quant(found, width)
        elif isinstance(found, Lens):
            lines += self._lens(found)
        elif isinstance(found, ChainReplay) and found.steps:
            lines += self._chain(found, width)
        return Text("\n").join(lines)

    def _shades(self):
        return (fg(self, "foreground"), fg(self, "secondary"), fg(self, "warning", bold=True), bg(self, "error"))

    def _surprise(self, found: Surprise, width: int) -> list[Text]:
        styles = self._shades()
        strip = Text()
        for piece, value in zip(found.pieces, found.surprise.tolist()):
            strip.append(piece, style=styles[shade(value)])
        return [legend([swatch(label, style) for label, style in zip(SHADE_LABELS, styles)], width), Text(""),
                strip, Text(""), Text(found.describe())]

    def _quant(self, found: QuantCost, width: int) -> list[Text]:
        styles = self._shades()
        strip = Text()
        for piece, value in zip(found.base.pieces, found.kld.tolist()):
            strip.append(piece, style=styles[shade(value, KLD_SHADES)])
        return [legend([swatch(label, style) for label, style in zip(KLD_LABELS, styles)], width), Text(""),
                strip, Text(""), *(Text(line) for line in found.describe())]

    def _lens(self, found: Lens) -> list[Text]:
        label = fg(self, "primary", bold=True)
        what = "the reply's token" if found.given else "the model's choice"
        lines = [Text.assemble(("predicting  ", label), (repr(shown_piece(found.piece)), "bold"), f"  ({what})"),
                 Text("layer   rank        p   top candidates", style=label)]
        first = found.first_top
        for layer in found.layers:
            tops = ", ".join(f"{shown_piece(c.piece)!r} {c.p:.0%}" for c in layer.top[:4])
            row = Text(f"{layer.layer:>5} {layer.rank:>6,} {layer.p:>8.3f}   {tops}")
            if first is not None and layer.layer >= first:
                row.stylize(fg(self, "success"))
            lines.append(row)
        logits = ", ".join(f"{shown_piece(c.piece)!r} {c.p:.0%}" for c in found.logits_top[:4])
        lines += [Text(f"llama.cpp's logits:   {logits}"),
                  Text(f"top-1 from layer {first} on" if first is not None else "not the top at the last layer"),
                  Text(found.how())]
        return lines

    def _chain(self, found: ChainReplay, width: int) -> list[Text]:
        step = found.steps[min(self.index, len(found.steps) - 1)]
        label = fg(self, "primary", bold=True)
        lines = [Text.assemble((f"token {step.index + 1} of {len(found.steps)}  ", label),
                               (repr(shown_piece(step.piece)), "bold"),
                               f"  p {step.p_model:.3f} from the model, {step.p_final:.3f} in the draw")]
        bar = max(10, min(30, width - 50))
        for stage in step.stages:
            mass = stacked_bar([(stage.mass, fg(self, "accent"))], 1.0, bar, fg(self, "panel"))
            tops = ", ".join(f"{shown_piece(c.piece)!r} {c.p:.0%}" for c in stage.top[:3])
            lines.append(Text.assemble((f"{stage.name:<12}", label), f"{stage.kept:>6,} left ", mass,
                                       f" {stage.mass:6.1%}  {tops}"))
        lines.append(Text(found.how()))
        return lines


class NextTokenScreen(Dialog[None]):
    """Asks for the view's numbers on a thread worker when opened, and for another token on ←/→."""

    FRAME_SUBTITLE = "←/→ reply token · Esc closes"
    FRAME = VerticalScroll
    BINDINGS = [
        Binding("q", "close", "Close"),
        Binding("left", "token(-1)", "Previous reply token", show=False),
        Binding("right", "token(1)", "Next reply token", show=False),
    ]
    DEFAULT_CSS = "NextTokenScreen > #dialog { width: 96%; max-width: 140; height: 92%; max-height: 92%; }"

    class Computed(Message):
        def __init__(self, found: Found) -> None:
            super().__init__()
            self.found = found

    def __init__(self, kind: Kind, compute: Compute, index: int | None = None) -> None:
        super().__init__(TITLES[kind] + " · Esc closes")
        self.kind = kind
        self._compute = compute
        self._stop = threading.Event()
        self._index = index

    def compose_body(self) -> ComposeResult:
        yield NextTokenView(self.kind, id="next-token")

    @property
    def view(self) -> NextTokenView:
        return self.query_one(NextTokenView)

    def on_mount(self) -> None:
        self.compute(self._index)

    def on_unmount(self) -> None:
        self._stop.set()

    @work(thread=True, exclusive=True, exit_on_error=False, group="next-token")
    def compute(self, index: int | None) -> None:
        try:
            found = self._compute(index, self._stop)
        except ChatappError as exc:
            found = exc.one_line()
        self.post_message(self.Computed(found))

    def on_next_token_screen_computed(self, message: Computed) -> None:
        view = self.view
        view.pending = None
        if isinstance(message.found, str):
            view.problem = message.found
        else:
            view.found, view.problem = message.found, None
            if isinstance(message.found, ChainReplay) and self._index is not None:
                view.index = self._index
        view.redraw()

    def action_token(self, step: int) -> None:
        view = self.view
        if isinstance(view.found, ChainReplay) and view.found.steps:
            view.index = max(0, min(len(view.found.steps) - 1, view.index + step))
            view.redraw()
        elif isinstance(view.found, Lens) and self._index is not None:
            self._index = max(0, self._index + step)
            view.pending = "reading every layer at that token…"
            view.redraw()
            self.compute(self._index)
