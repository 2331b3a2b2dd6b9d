"""One line at the top: the model, its quantization, the backend, the context size, the session,
and what is attached (F8 removes one). On a narrow terminal it shortens (the model's name cut
with …, then the session's) and never loses the model, quant, backend and context."""

from __future__ import annotations

from rich.text import Text
from textual.reactive import reactive
from textual.widget import Widget

from chatapp.engine.backend import NOT_REPORTED
from chatapp.engine.chat.engine import ModelSummary
from chatapp.format import one_line_text


def describe(summary: ModelSummary) -> str:
    """The model, and where it runs: the accelerator in-process, the URL and build of a server."""
    return "".join(describe_parts(summary))


def describe_parts(summary: ModelSummary) -> tuple[str, str]:
    """`describe` as the model's name and the rest (" · quant · backend · ctx N"): the header
    shortens the name and keeps the rest."""
    where = summary.backend if summary.kind == "in-process" else f"{summary.location} ({summary.build})"
    base = " · base model" if summary.base_model else ""  # its replies continue text: the load notice says why
    base += " · sees images" if summary.projector else ""  # a projector beside it (the Model panel says which)
    return one_line_text(summary.name), f"{base} · {summary.quant or NOT_REPORTED} · {where} · ctx {summary.n_ctx:,}"


class AppHeader(Widget):
    DEFAULT_CSS = """
    AppHeader {
        dock: top;
        height: 1;
        background: $panel;
        color: $foreground;
        padding: 0 1;
    }
    """

    summary: reactive[ModelSummary | None] = reactive(None)
    session: reactive[str | None] = reactive(None)
    preset: reactive[str | None] = reactive(None)
    """The preset the chat runs with (chatapp.presets); None: none."""
    shape: reactive[str | None] = reactive(None)
    """The shape every reply must have, in words (chatapp.ui.screens.reply_shape); None: free text."""
    attachments: reactive[tuple[str, ...]] = reactive(())
    """Names of the attached files, in the order they were attached."""
    status: reactive[str] = reactive("")
    """What the app is doing: "", "prefill…", "generating…", "loading model…"."""

    def __init__(self, *, id: str | None = None, incognito: bool = False) -> None:
        super().__init__(id=id)
        self.incognito = incognito
        """No chat is kept unless saved as a session (the `incognito` setting)."""

    def render(self) -> Text:
        width = self.content_size.width
        status = f"  {self.status}" if self.status else ""
        # The parts of the line, cut in CUTS' order until it fits: the model, quant, backend and
        # context stay at any width a terminal has (the model's name cut with …, never dropped).
        parts = {"brand": "chatapp", "name": "", "figures": "", "session": "", "preset": "", "shape": "",
                 "status": status}
        if self.summary is not None:
            name, figures = describe_parts(self.summary)
            parts["name"], parts["figures"] = f"  {name}", figures
        if self.session:
            parts["session"] = f"  session: {self.session}"
        else:
            parts["session"] = "  incognito: not kept" if self.incognito else "  session: new"
        if self.preset:
            parts["preset"] = f"  preset: {one_line_text(self.preset)}"
        if self.shape:
            parts["shape"] = "  shape: " + ("JSON" if self.shape.startswith("JSON") else "GBNF")
        if width > 0:
            fit(parts, width)
        left = Text(no_wrap=True)
        left.append(parts["brand"], style="bold")
        for key in ("name", "figures", "session", "preset", "shape"):
            left.append(parts[key])
        if self.attachments:  # what is attached comes last: on a narrow line it is what is cut
            # Names come from outside (a saved session's may predate escaping at load): one line each.
            left.append(f"  attached (F8): {', '.join(one_line_text(name) for name in self.attachments)}")
        if not parts["status"]:
            return left
        # The status (prefill…, generating…) matters most: it stays, at the right; the rest gives way.
        status_text = Text(parts["status"].removeprefix("  "), style="bold italic")
        if width > 0:
            left.truncate(max(width - len(status_text) - 2, 0), overflow="ellipsis", pad=True)
        return Text.assemble(left, "  ", status_text, no_wrap=True)


CUTS: tuple[tuple[str, int], ...] = (
    ("preset", 0), ("name", 22), ("session", 16), ("name", 10), ("shape", 0), ("session", 0), ("brand", 0),
    ("name", 4),
)
"""Which part of the header gives way first, and how far (0: dropped whole; else the characters
it keeps, its last one an …): the preset's name first (a palette entry names it too), the
model's name down to a recognisable stem, the session's name, the name further, the reply
shape (said when it was set, and after each turn), the session and "chatapp" themselves. What
is attached is not counted: it comes last and is cut where the line ends."""


def fit(parts: dict[str, str], width: int) -> None:
    """Shorten `parts` in CUTS' order until together they take at most `width` cells."""
    for key, keep in CUTS:
        over = sum(len(text) for text in parts.values()) - width
        if over <= 0:
            return
        text = parts[key]
        if len(text) <= keep:
            continue
        if keep == 0:
            parts[key] = ""
        else:
            cut = max(keep, len(text) - over)
            parts[key] = text[:cut - 1] + "…"
