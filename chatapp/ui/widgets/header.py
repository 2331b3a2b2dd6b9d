"""One line at the top: the model, its quantization, the backend, the context size, the session,
and what is attached (F8 removes one)."""

from __future__ import annotations

from rich.text import Text
from textual.reactive import reactive
from textual.widget import Widget

from chatapp.engine.backend import NOT_REPORTED
from chatapp.engine.chat.engine import ModelSummary
from chatapp.format import one_line_text


def describe(summary: ModelSummary) -> str:
    """The model, and where it runs: the accelerator in-process, the URL and build of a server."""
    where = summary.backend if summary.kind == "in-process" else f"{summary.location} ({summary.build})"
    return f"{summary.name} · {summary.quant or NOT_REPORTED} · {where} · ctx {summary.n_ctx:,}"


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
    attachments: reactive[tuple[str, ...]] = reactive(())
    """Names of the attached files, in the order they were attached."""
    status: reactive[str] = reactive("")
    """What the app is doing: "", "prefill…", "generating…", "loading model…"."""

    def render(self) -> Text:
        left = Text(no_wrap=True)
        left.append("chatapp", style="bold")
        if self.summary is not None:
            left.append("  " + describe(self.summary))
        left.append(f"  session: {self.session or '(none)'}")
        if self.attachments:
            # Names come from outside (a saved session's may predate escaping at load): one line each.
            left.append(f"  attached (F8): {', '.join(one_line_text(name) for name in self.attachments)}")
        if not self.status:
            return left
        # The status (prefill…, generating…) matters most: it stays; the rest gives way.
        status = Text(self.status, style="bold italic")
        room = max(self.content_size.width - len(status) - 2, 0)
        left.truncate(room, overflow="ellipsis", pad=True)
        return Text.assemble(left, "  ", status, no_wrap=True)
