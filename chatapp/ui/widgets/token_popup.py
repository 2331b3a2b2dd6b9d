"""A reply token's alternatives next to it in the transcript: the confidence view's popup.

The transcript mounts one when a token of a shaded reply is clicked, or asked for from the keys
(Alt+P), and places it under the token (over it when there is no room below) inside its own
scrolling area, so it stays by the token as the transcript scrolls. It draws what the transcript
hands it (attributes down) and says what the user did with messages (up): another token (←/→,
`Moved`), a candidate chosen (1-9 or a click on its line, `AlternativeChosen`), closed (Esc, or
the focus gone elsewhere, `Closed`).
"""

from __future__ import annotations

from rich.text import Text
from textual import events
from textual.binding import Binding
from textual.message import Message

from chatapp.engine.sampling import TokenProbs
from chatapp.ui.widgets.confidence import CHOOSABLE, AlternativeChosen, alternatives
from chatapp.ui.widgets.paint import ThemedPanel


class TokenPopup(ThemedPanel, can_focus=True):
    DEFAULT_CSS = """
    TokenPopup {
        position: absolute;
        layer: popup;
        width: 76;
        max-width: 100%;
        height: auto;
        border: round $accent;
        border-title-color: $text;
        border-subtitle-color: $text-muted;
        background: $panel;
        padding: 0 1;
    }
    """

    BINDINGS = [
        Binding("left", "move(-1)", "Previous token", show=False,
                tooltip="The alternatives of the reply's token before this one"),
        Binding("right", "move(1)", "Next token", show=False,
                tooltip="The alternatives of the reply's token after this one"),
        *(Binding(str(n), f"choose({n})", f"Alternative {n}", show=False,
                  tooltip="A new reply from this token on, with that candidate in its place (the old "
                          "reply stays)") for n in range(1, CHOOSABLE + 1)),
        Binding("escape", "close", "Close", show=False, tooltip="Close the alternatives; typing goes on in the "
                                                                  "composer"),
    ]

    class Moved(Message):
        """Show the alternatives of token `step` of the same reply instead."""

        def __init__(self, step: int) -> None:
            super().__init__()
            self.step = step

    class Closed(Message):
        """The popup is done with: Esc, or the focus went elsewhere."""

    def __init__(self) -> None:
        super().__init__(id="token-popup")
        self.message_id = ""
        self.probs: tuple[TokenProbs, ...] = ()
        self.step = 0
        self.border_subtitle = "←/→ token · 1–9 branch · Esc"

    def point(self, message_id: str, probs: tuple[TokenProbs, ...], step: int) -> None:
        """Show token `step` of reply `message_id`, whose tokens have `probs`."""
        self.message_id, self.probs, self.step = message_id, probs, step
        self.border_title = f"token {step + 1} of {len(probs)} · reply {message_id}"
        self.redraw()

    def draw(self, width: int) -> Text:
        if not 0 <= self.step < len(self.probs):
            return Text("")
        return alternatives(self, self.probs[self.step], width)

    # --- what the user does here -------------------------------------------------------------
    def action_move(self, by: int) -> None:
        if 0 <= self.step + by < len(self.probs):
            self.post_message(self.Moved(self.step + by))

    def action_choose(self, number: int) -> None:
        if 0 <= self.step < len(self.probs) and number <= len(self.probs[self.step].top):
            self.post_message(AlternativeChosen(self.message_id, self.step, self.probs[self.step].top[number - 1].id))

    def action_close(self) -> None:
        self.post_message(self.Closed())

    def on_click(self, event: events.Click) -> None:
        event.stop()  # a click in the popup is not one on the message under it
        number = event.style.meta.get("choose")
        if isinstance(number, int):
            self.action_choose(number)

    def on_blur(self) -> None:
        # Once the screen has settled: a click on another token moves the popup and focuses it again.
        self.call_after_refresh(self._closed_if_unfocused)

    def _closed_if_unfocused(self) -> None:
        if self.is_attached and not self.has_focus and self.screen.is_active:
            self.post_message(self.Closed())
