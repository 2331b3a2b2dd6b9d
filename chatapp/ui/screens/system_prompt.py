"""Edit the system prompt in a multi-line box."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Label, TextArea


class SystemPromptScreen(ModalScreen[str | None]):
    """Dismisses with the new prompt (possibly empty), or None when cancelled."""

    BINDINGS = [Binding("escape", "cancel", "Cancel"), Binding("ctrl+s", "save", "Save", priority=True)]

    DEFAULT_CSS = """
    SystemPromptScreen { align: center middle; }
    SystemPromptScreen > Vertical {
        width: 90%; max-width: 100; height: auto; max-height: 90%;
        border: round $primary; background: $surface; padding: 0 1;
    }
    SystemPromptScreen TextArea { height: 10; }
    SystemPromptScreen Horizontal { height: auto; align-horizontal: right; }
    SystemPromptScreen Button { margin-left: 1; }
    """

    def __init__(self, prompt: str) -> None:
        super().__init__()
        self.prompt = prompt

    def compose(self) -> ComposeResult:
        with Vertical() as box:
            box.border_title = "System prompt"
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
            self.action_cancel()

    def action_save(self) -> None:
        self.dismiss(self.query_one(TextArea).text.strip())

    def action_cancel(self) -> None:
        self.dismiss(None)
