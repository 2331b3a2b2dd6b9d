"""Edit the system prompt in a multi-line box."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal
from textual.widgets import Button, Label, TextArea

from chatapp.ui.screens.dialog import Dialog


class SystemPromptScreen(Dialog[str | None]):
    """Dismisses with the new prompt (possibly empty), or None when cancelled."""

    FRAME_TITLE = "System prompt"
    BINDINGS = [Binding("ctrl+s", "save", "Save", priority=True)]

    DEFAULT_CSS = """
    SystemPromptScreen TextArea { height: 10; }
    SystemPromptScreen Horizontal { height: auto; align-horizontal: right; }
    SystemPromptScreen Button { margin-left: 1; }
    """

    def __init__(self, prompt: str) -> None:
        super().__init__()
        self.prompt = prompt

    def compose_body(self) -> ComposeResult:
        yield Label("Applies from the next turn; earlier turns stay as they were. Ctrl+S saves, Esc cancels.")
        yield TextArea(self.prompt, id="system-text", soft_wrap=True)
        with Horizontal():
            yield Button("Cancel", id="cancel")
            yield Button("Save", id="save", variant="primary")

    def on_mount(self) -> None:
        self.query_one(TextArea).focus()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "save":
            self.action_save()
        else:
            self.action_close()

    def action_save(self) -> None:
        self.dismiss(self.query_one(TextArea).text.strip())
