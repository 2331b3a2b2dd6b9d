"""Temperature, max tokens and a thinking model's thinking (on, off or a budget), validated (by
chatapp.config.validate and the thinking mode's own parser, as the CLI and the config file are)
before they reach the engine."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.widgets import Button, Input, Label

from chatapp.config import MAX_TEMPERATURE, MAX_TOKENS, Settings
from chatapp.errors import ChatappError, ConfigError
from chatapp.ui.screens.dialog import Dialog


@dataclass(frozen=True)
class Sampling:
    temperature: float
    max_tokens: int
    think: str = "on"
    """"on", "off" or a budget in tokens (chatapp.engine.chat.thoughts.Thinking.set_mode)."""


class SamplingScreen(Dialog[Sampling | None]):
    FRAME_TITLE = "Sampling"

    DEFAULT_CSS = """
    SamplingScreen > #dialog { width: 64; }
    SamplingScreen Input { margin-bottom: 1; }
    SamplingScreen #sampling-error { color: $error; height: auto; }
    SamplingScreen Horizontal { height: auto; align-horizontal: right; }
    SamplingScreen Button { margin-left: 1; }
    """

    def __init__(self, current: Sampling, check_think: Callable[[str], str] | None = None) -> None:
        super().__init__()
        self.current = current
        self.check_think = check_think
        """The thinking mode's parser (returns the mode, raises ChatappError in one line); None:
        the loaded model does not think, and the field is not shown."""

    def compose_body(self) -> ComposeResult:
        yield Label(f"Temperature (0 = greedy, up to {MAX_TEMPERATURE:g})")
        yield Input(f"{self.current.temperature:g}", id="temperature", type="number")
        yield Label(f"Max tokens per reply (1 to {MAX_TOKENS:,})")
        yield Input(str(self.current.max_tokens), id="max-tokens", type="integer")
        if self.check_think is not None:
            yield Label("Thinking: on, off, or a budget of thought tokens a reply")
            yield Input(self.current.think, id="think")
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
            self.action_close()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.apply()

    def apply(self) -> None:
        temperature = self.query_one("#temperature", Input).value.strip()
        max_tokens = self.query_one("#max-tokens", Input).value.strip()
        try:
            checked = Settings().replace(temperature=float(temperature), max_tokens=int(max_tokens))
            think = self.current.think
            if self.check_think is not None:
                think = self.check_think(self.query_one("#think", Input).value)
        except ValueError:
            problem = f"temperature must be a number and max tokens a whole number, got {temperature!r} " \
                      f"and {max_tokens!r}"
        except ConfigError as exc:
            problem = exc.message
        except ChatappError as exc:
            problem = exc.one_line()
        else:
            self.dismiss(Sampling(checked.temperature, checked.max_tokens, think))
            return
        self.query_one("#sampling-error", Label).update(problem)
