"""The multi-line message box: Enter sends, Ctrl+J (and Shift+Enter or Alt+Enter, where the
terminal reports them) breaks the line, Ctrl+U clears it.

Keys that arrive in a burst (a paste from a terminal without bracketed paste: every
character is a key event) are inserted as one edit. TextArea re-wraps the line it edits on
every insert, so 20 KB typed into one line took 25 s one key at a time (O(n^2)); gathered,
it is one edit. An Enter inside such a burst (more text follows it) is a line break of the
pasted text; an Enter that ends a burst sends, as it does when typed (`tmux send-keys 'hi'
Enter`, expect scripts).

Commands typed here start with a slash (`/attach PATH`, `/detach NAME`); after `/attach `, Tab
completes the path as a shell does (chatapp.ui.path_complete).
"""

from __future__ import annotations

import time
from pathlib import Path

from textual.binding import Binding
from textual.events import Key, Paste
from textual.message import Message
from textual.widgets import TextArea

from chatapp.ui.key_bursts import typed
from chatapp.ui.path_complete import complete_path

BURST_FLUSH_S = 0.05
"""While keys arrive in a burst, gather them this long between inserts (a paste of 20 KB
arrives as 20,000 key events; each insert re-wraps and repaints the composer)."""
PLACEHOLDER = "Message the model…  Enter sends · Ctrl+J new line · Ctrl+U clears · F1 help"
"""One line at 80 columns ("Ctrl+J for a new line" pushed "help" onto a second)."""
"""Alt+Enter is no promise here: tmux and xterm send it as ESC Enter, which reads as Enter (it
breaks the line only where the terminal reports modifiers, as kitty's protocol does)."""
ATTACH = "/attach "


class Composer(TextArea):
    """A TextArea that submits on Enter. Many terminals send Shift+Enter and Alt+Enter as plain
    Enter, so Ctrl+J inserts a newline too."""

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
        Binding("ctrl+u", "clear_all", "Clear", show=False,
                tooltip="Clear the whole message (readline's Ctrl+U; undo brings it back)"),
        Binding("ctrl+d", "delete_or_quit", "Quit when empty", show=False,
                tooltip="On an empty composer, quit (as in a shell); else delete the character after the cursor"),
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

    class PathCandidates(Message):
        """Tab after `/attach ` matched several names: the app lists them."""

        def __init__(self, candidates: tuple[str, ...]) -> None:
            super().__init__()
            self.candidates = candidates

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes, soft_wrap=True, show_line_numbers=False,
                         tab_behavior="focus", placeholder=PLACEHOLDER, compact=True)
        self._typed: list[str] = []
        """Characters typed but not yet inserted: they go in together once the burst is read."""
        self._burst_until = 0.0
        """Until then, keys are gathered for BURST_FLUSH_S (the last insert took several keys)."""
        self._enter_ends_burst = False
        """The last key gathered was an Enter: if nothing follows it, it sends."""

    def on_key(self, event: Key) -> None:
        burst = bool(self._typed)
        if event.is_printable and not typed(event):  # Alt+E as tmux sends it: a binding's, not an "e"
            event.prevent_default()
            return
        if event.is_printable and event.character and not self.read_only:
            event.stop()
            event.prevent_default()
            self.type_text(event.character)
            return
        if event.key in self.SUBMIT_KEYS and burst:  # a pasted line break, or the end of a burst
            event.stop()
            event.prevent_default()
            self._typed.append("\n")
            self._enter_ends_burst = True
            return
        self.flush_typed()  # anything else acts on the text as typed so far
        if event.key == "tab" and self.text.startswith(ATTACH) and "\n" not in self.text:
            event.stop()
            event.prevent_default()
            self.complete_attach_path()
            return
        if event.key in self.SUBMIT_KEYS or event.key in self.NEWLINE_KEYS:
            event.stop()
            event.prevent_default()  # TextArea would insert its own newline for Enter
            self.action_submit() if event.key in self.SUBMIT_KEYS else self.action_newline()

    def _on_paste(self, event: Paste) -> None:
        """Keys typed just before a paste go in before it, in the order they came; an Enter
        among them is a line break (more text followed it), never a send. (Textual then calls
        TextArea's own handler, which inserts the paste.)"""
        self._enter_ends_burst = False
        self.flush_typed()

    def type_text(self, text: str) -> None:
        """Printable keys (one, or a burst the driver gathered; see chatapp.ui.key_bursts):
        gathered with the others of their burst, inserted once it is read. The app hands keys
        here directly while the composer has the focus (see ChatApp.on_event)."""
        burst = bool(self._typed)
        self._typed.append(text)
        self._enter_ends_burst = False
        if not burst:
            if time.monotonic() < self._burst_until:
                self.set_timer(BURST_FLUSH_S, self.flush_typed)
            else:
                self.call_later(self.flush_typed)  # after the key events already queued

    def flush_typed(self) -> None:
        """Insert the characters gathered from a burst of key events, as one edit; an Enter
        that ended the burst then sends."""
        if not self._typed:
            return
        text, self._typed = "".join(self._typed), []
        send, self._enter_ends_burst = self._enter_ends_burst, False
        if send:
            text = text[:-1]
        if len(text) > 1:  # faster than anyone types: keep gathering for a while
            self._burst_until = time.monotonic() + 2 * BURST_FLUSH_S
        self.insert(text)
        # The box may grow with the text; once laid out at its new size, keep the cursor in view.
        self.call_after_refresh(self.scroll_cursor_visible)
        if send:
            self.action_submit()

    def complete_attach_path(self) -> None:
        """Tab after `/attach `: complete the path; several matches are posted for the app to list."""
        completion = complete_path(self.text[len(ATTACH):], Path.cwd())
        self.load_text(ATTACH + completion.text)
        self.move_cursor(self.document.end)
        if completion.candidates:
            self.post_message(self.PathCandidates(completion.candidates))

    def action_submit(self) -> None:
        self.flush_typed()
        if self.text.strip():
            self.post_message(self.Submitted(self, self.text))

    def action_clear_all(self) -> None:
        self.flush_typed()
        self.clear()  # an edit like any other: Ctrl+Z undoes it

    def action_newline(self) -> None:
        self.flush_typed()
        self.insert("\n")

    def action_delete_or_quit(self) -> None:
        # A shell's Ctrl+D: end of input when there is nothing typed, else the usual delete.
        if self.text:
            self.action_delete_right()
        else:
            self.app.action_quit()
