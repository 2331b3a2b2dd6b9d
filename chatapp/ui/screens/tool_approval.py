"""Asked before a tool call runs: the tool, its server, and the call's full arguments,
pretty-printed and never cut (a long one scrolls), shown as plain text (an argument is data: any
markup or escape in it is shown, not obeyed). Approve once (o), always for this tool in this
chat (a), or deny (d, or Esc): a denial goes back to the model as the tool's result."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, VerticalScroll
from textual.widgets import Button, Label, Static

from chatapp.engine.tools.spec import ToolCall, ToolSpec
from chatapp.format import one_line_text, text_start
from chatapp.ui.screens.dialog import Dialog

ONCE, ALWAYS, DENY = "once", "always", "deny"
DESCRIPTION_CHARS = 200


class ToolApprovalScreen(Dialog[str | None]):
    """Dismisses with ONCE, ALWAYS or DENY; None (Esc) is a denial too."""

    FRAME_TITLE = "Run a tool?"
    TONE = "warning"
    BINDINGS = [Binding("o", "answer('once')", "Approve once"), Binding("a", "answer('always')", "Always"),
                Binding("d", "answer('deny')", "Deny")]

    DEFAULT_CSS = """
    ToolApprovalScreen Label { width: 1fr; }
    ToolApprovalScreen #arguments { height: auto; max-height: 20; border: round $panel; }
    ToolApprovalScreen Horizontal { height: auto; align-horizontal: right; margin-top: 1; }
    ToolApprovalScreen Button { margin-left: 1; }
    """

    def __init__(self, call: ToolCall, spec: ToolSpec) -> None:
        super().__init__()
        self.call = call
        self.spec = spec

    @property
    def arguments(self) -> str:
        """What the dialog shows of the call's arguments: all of them."""
        return self.call.pretty_arguments()

    def compose_body(self) -> ComposeResult:
        # A server's description can run to pages: its start, cut at a word, says what the tool is for.
        about = text_start(self.spec.description, DESCRIPTION_CHARS)
        yield Label(f"The model asks to run {one_line_text(self.spec.name)} from {one_line_text(self.spec.server)}"
                    f" ({about}) with these arguments:", markup=False)
        with VerticalScroll(id="arguments"):
            yield Static(self.arguments, markup=False, id="arguments-text")
        with Horizontal():
            yield Button("Deny (d)", id=DENY, variant="error")
            yield Button("Always for this tool (a)", id=ALWAYS)
            yield Button("Approve once (o)", id=ONCE, variant="primary")

    def on_mount(self) -> None:
        self.query_one(f"#{DENY}").focus()  # Enter alone never runs a tool

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id)

    def action_answer(self, answer: str) -> None:
        self.dismiss(answer)
