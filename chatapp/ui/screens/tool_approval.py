"""Asked before a tool call runs: the tool, its server (and the command or URL it runs from),
what the server says the tool does, and the call's full arguments. Each is in a frame of its own
that nothing from outside can reach: the description is one line, cut, with every control,
bidi and zero-width character shown as an escape, so it cannot draw a fake "Arguments:" block or
buttons over the real ones; the arguments are the exact JSON the tool is sent (pretty_arguments),
never cut (a long one scrolls). All of it is plain text: markup or an escape in it is shown, not
obeyed. Approve once (o), always for this tool of this server while its schema stays the same
(a), or deny (d, or Esc): a denial goes back to the model as the tool's result."""

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
    ToolApprovalScreen #description { width: 1fr; border: round $panel; color: $text-muted; }
    ToolApprovalScreen #arguments { height: auto; max-height: 20; border: round $accent; }
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
        spec = self.spec
        origin = f", run as {one_line_text(spec.origin)}" if spec.origin else ""
        yield Label(f"The model asks to run {one_line_text(spec.name)} from {one_line_text(spec.server)}{origin}.",
                    markup=False)
        # A server's description can run to pages: its start, on one line and cut at a word, says what it is for.
        description = Static(text_start(spec.description, DESCRIPTION_CHARS) or "(no description)", markup=False,
                             id="description")
        description.border_title = "What its server says it does"
        yield description
        with VerticalScroll(id="arguments") as arguments:
            arguments.border_title = "The arguments it is sent, exactly"
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
