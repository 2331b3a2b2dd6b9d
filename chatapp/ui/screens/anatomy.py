"""F7: the loaded model's anatomy, drawn from its GGUF header in the theme's colours.

The same sections as `chatapp models anatomy` (chatapp.engine.inside.anatomy_view), plus two bars:
the weights by tensor family, and each block's bytes split the same way.
"""

from __future__ import annotations

from pathlib import Path

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.message import Message

from chatapp.engine.inside.anatomy import FAMILIES, FAMILY_LABELS, Anatomy
from chatapp.engine.inside.anatomy_view import sections
from chatapp.format import human_bytes, one_line_text
from chatapp.ui.screens.dialog import Dialog
from chatapp.ui.widgets.paint import ThemedPanel, fg, legend, stacked_bar, swatch

FAMILY_COLOURS = {"embedding": "secondary", "attention": "primary", "ffn": "accent", "experts": "warning",
                  "norms": "success", "output": "error", "other": "kv-template"}
"""The theme colour each tensor family is drawn in."""
LABEL_WIDTH = 20


class AnatomyView(ThemedPanel):
    """The anatomy as one Text: sections of label/value rows, then the family and block bars."""

    DEFAULT_CSS = "AnatomyView { height: auto; }"

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.anatomy: Anatomy | None = None
        self.problem: str | None = None

    def show(self, anatomy: Anatomy | None, problem: str | None = None) -> None:
        self.anatomy, self.problem = anatomy, problem
        self.redraw()

    def draw(self, width: int) -> Text:
        if self.problem:
            return Text(self.problem, style=fg(self, "error"))
        if self.anatomy is None:
            return Text("reading the GGUF header…", style="italic")
        a = self.anatomy
        heading = fg(self, "primary", bold=True)
        label_style = fg(self, "foreground", bold=True)
        out = [Text(one_line_text(a.name), style="bold"), Text(one_line_text(Path(a.path).name), style="dim")]
        for section in sections(a):
            out.append(Text(""))
            out.append(Text(section.title, style=heading))
            label_width = min(LABEL_WIDTH, max(width // 3, 8))
            for label, value in section.rows:
                line = Text(f"{label:<{label_width}} " if label else "", style=label_style)
                line.append(value)
                out.append(line)
            if section.title.startswith("Tensor families"):
                out += self._families(a, width)
        out += self._blocks(a, width)
        return Text("\n").join(out)

    def _styles(self) -> dict:
        return {name: fg(self, FAMILY_COLOURS[name]) for name in FAMILIES}

    def _families(self, a: Anatomy, width: int) -> list[Text]:
        styles = self._styles()
        segments = [(tally.bytes, styles[name]) for name, tally in a.families.items()]
        entries = [swatch(FAMILY_LABELS[name], styles[name]) for name in a.families]
        return [stacked_bar(segments, a.weight_bytes, width, fg(self, "kv-free")), legend(entries, width)]

    def _blocks(self, a: Anatomy, width: int) -> list[Text]:
        """One bar per block, scaled to the largest, split by family."""
        if not a.blocks:
            return []
        styles, largest = self._styles(), max(b.bytes for b in a.blocks)
        digits = len(str(a.blocks[-1].index))
        out = [Text(""), Text("Blocks, by bytes", style=fg(self, "primary", bold=True))]
        bar_width = max(width - digits - 12, 4)
        for block in a.blocks:
            cells = max(1, round(bar_width * block.bytes / largest)) if largest else 1
            segments = [(block.family_bytes.get(name, 0), styles[name]) for name in FAMILIES]
            line = Text(f"{block.index:>{digits}} ", style="dim")
            line.append_text(stacked_bar(segments, block.bytes, cells, fg(self, "kv-free")))
            line.append(f" {human_bytes(block.bytes)}")
            out.append(line)
        return out


class AnatomyScreen(Dialog[None]):
    """Reads the header in a thread worker (milliseconds, but file I/O stays off the UI thread)."""

    FRAME = VerticalScroll
    BINDINGS = [Binding("q", "close", "Close")]  # Esc too (Dialog's), and F7 (the app's binding)

    DEFAULT_CSS = "AnatomyScreen > #dialog { width: 94%; max-width: 120; height: 92%; max-height: 92%; }"

    class Read(Message):
        def __init__(self, anatomy: Anatomy | None, problem: str | None = None) -> None:
            super().__init__()
            self.anatomy, self.problem = anatomy, problem

    def __init__(self, path: Path, kv_type: str = "f16") -> None:
        super().__init__(f"Anatomy · {one_line_text(Path(path).name)} · Esc closes")
        self.path, self.kv_type = Path(path), kv_type

    def compose_body(self) -> ComposeResult:
        yield AnatomyView(id="anatomy")

    def on_mount(self) -> None:
        self.read_anatomy()

    @work(thread=True, exclusive=True, exit_on_error=False, group="anatomy")
    def read_anatomy(self) -> None:
        from chatapp.engine.inside.anatomy import anatomy

        try:
            self.post_message(self.Read(anatomy(self.path, self.kv_type)))
        except (ValueError, OSError) as exc:
            self.post_message(self.Read(None, one_line_text(f"cannot read {self.path.name}: {exc}")))

    def on_anatomy_screen_read(self, message: Read) -> None:
        self.query_one(AnatomyView).show(message.anatomy, message.problem)
