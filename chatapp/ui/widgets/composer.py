"""The multi-line message box: Enter sends, Ctrl+J / Alt+Enter / Shift+Enter break the line."""

from __future__ import annotations

from textual.binding import Binding
from textual.events import Key
from textual.message import Message
from textual.widgets import TextArea

PLACEHOLDER = "Message the model…  Enter sends · Ctrl+J or Alt+Enter for a new line · F1 help"


class Composer(TextArea):
    """A TextArea that submits on Enter. Many terminals send Shift+Enter as plain Enter,
    so Ctrl+J and Alt+Enter insert a newline too."""

    DEFAULT_CSS = """
    Composer {
        height: auto;
        min-height: 3;
        max-height: 10;
    }
    """

    SUBMIT_KEYS = ("enter",)
    NEWLINE_KEYS = ("shift+enter", "ctrl+j", "alt+enter")
    BINDINGS = [
        Binding(",".join(SUBMIT_KEYS), "submit", "Send"),
        Binding(",".join(NEWLINE_KEYS), "newline", "New line", key_display="^J"),
    ]
    """For the footer and the help screen; `on_key` acts on these keys itself, in typing order
    (a binding would run before the characters typed just ahead of it were inserted)."""

    class Submitted(Message):
        def __init__(self, composer: "Composer", text: str) -> None:
            super().__init__()
            self.composer = composer
            self.text = text

        @property
        def control(self) -> "Composer":
            return self.composer

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes, soft_wrap=True, show_line_numbers=False,
                         tab_behavior="focus", placeholder=PLACEHOLDER, compact=True)

    def on_key(self, event: Key) -> None:
        if event.key in self.SUBMIT_KEYS or event.key in self.NEWLINE_KEYS:
            event.stop()
            event.prevent_default()  # TextArea would insert its own newline for Enter
            self.action_submit() if event.key in self.SUBMIT_KEYS else self.action_newline()

    def action_submit(self) -> None:
        if self.text.strip():
            self.post_message(self.Submitted(self, self.text))

    def action_newline(self) -> None:
        self.insert("\n")
