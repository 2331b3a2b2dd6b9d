"""Asked when the open session was changed by another process (another `chat`, an `ask`):
reload it, or keep this chat on screen without saving it into that session."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal
from textual.widgets import Button, Label

from chatapp.ui.screens.dialog import Dialog

RELOAD = "reload"
KEEP = "keep"


class SessionChangedScreen(Dialog[str | None]):
    """Dismisses with RELOAD, KEEP, or None (Esc: decide later; the next turn asks again)."""

    FRAME_TITLE = "Session changed elsewhere"
    TONE = "warning"
    BINDINGS = [Binding("r", "answer('reload')", "Reload"), Binding("k", "answer('keep')", "Keep unsaved")]

    DEFAULT_CSS = """
    SessionChangedScreen > #dialog { max-width: 80; }
    SessionChangedScreen Label { width: 1fr; }
    SessionChangedScreen Horizontal { height: auto; align-horizontal: right; margin-top: 1; }
    SessionChangedScreen Button { margin-left: 1; }
    """

    def __init__(self, what: str, *, unsaved_turn: bool = False) -> None:
        super().__init__()
        self.what = what
        self.unsaved_turn = unsaved_turn

    def compose_body(self) -> ComposeResult:
        lost = ("The last turn here was not saved. " if self.unsaved_turn else "")
        yield Label(f"{self.what}. {lost}Reload it (r) to continue from what is saved: this chat is "
                    "replaced and your message stays in the composer. Or keep this chat (k): it stays on "
                    "screen, no longer saved into that session (F6 → save as keeps it).", markup=False)
        with Horizontal():
            yield Button("Later", id="later")
            yield Button("Keep unsaved", id=KEEP)
            yield Button("Reload", id=RELOAD, variant="primary")

    def on_mount(self) -> None:
        self.query_one(f"#{RELOAD}").focus()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id if event.button.id in (RELOAD, KEEP) else None)

    def action_answer(self, answer: str | None) -> None:
        self.dismiss(answer)
