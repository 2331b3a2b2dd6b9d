"""Temperature and max tokens, validated before they reach the engine."""

from __future__ import annotations

from dataclasses import dataclass

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.validation import Integer, Number
from textual.widgets import Button, Input, Label

MAX_TEMPERATURE = 5.0
MAX_TOKENS = 32768


@dataclass(frozen=True)
class Sampling:
    temperature: float
    max_tokens: int


class SamplingScreen(ModalScreen[Sampling | None]):
    BINDINGS = [Binding("escape", "cancel", "Cancel")]

    DEFAULT_CSS = """
    SamplingScreen { align: center middle; }
    SamplingScreen > Vertical {
        width: 64; height: auto;
        border: round $primary; background: $surface; padding: 0 1;
    }
    SamplingScreen Input { margin-bottom: 1; }
    SamplingScreen #sampling-error { color: $error; height: auto; }
    SamplingScreen Horizontal { height: auto; align-horizontal: right; }
    SamplingScreen Button { margin-left: 1; }
    """

    def __init__(self, current: Sampling) -> None:
        super().__init__()
        self.current = current

    def compose(self) -> ComposeResult:
        with Vertical() as box:
            box.border_title = "Sampling"
            yield Label(f"Temperature (0 = greedy and repeatable, up to {MAX_TEMPERATURE:g})")
            yield Input(f"{self.current.temperature:g}", id="temperature", type="number",
                        validators=[Number(minimum=0.0, maximum=MAX_TEMPERATURE)])
            yield Label(f"Max tokens per reply (1 to {MAX_TOKENS:,})")
            yield Input(str(self.current.max_tokens), id="max-tokens", type="integer",
                        validators=[Integer(minimum=1, maximum=MAX_TOKENS)])
            yield Label("", id="sampling-error")
            with Horizontal():
                yield Button("Cancel", id="cancel")
                yield Button("Apply", id="apply", variant="primary")

    def on_mount(self) -> None:
        self.query_one("#temperature", Input).focus()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "apply":
            self.apply()
        else:
            self.action_cancel()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.apply()

    def apply(self) -> None:
        problems = []
        for input_id, name in (("#temperature", "temperature"), ("#max-tokens", "max tokens")):
            result = self.query_one(input_id, Input).validate(self.query_one(input_id, Input).value)
            if result is not None and not result.is_valid:
                problems.append(f"{name}: {'; '.join(result.failure_descriptions)}")
        if problems:
            self.query_one("#sampling-error", Label).update("\n".join(problems))
            return
        self.dismiss(Sampling(float(self.query_one("#temperature", Input).value),
                              int(self.query_one("#max-tokens", Input).value)))

    def action_cancel(self) -> None:
        self.dismiss(None)
