"""The sampler's settings (temperature, max tokens, top-k, top-p, min-p, the seed) and a thinking
model's thinking (on, off or a budget), validated (by chatapp.config.validate and the thinking
mode's own parser, as the CLI and the config file are) before they reach the engine. The same
values can be typed as Ollama's `/set parameter NAME VALUE` (chatapp.ui.slash)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields

from textual.app import ComposeResult
from textual.containers import Grid, Horizontal, Vertical, VerticalScroll
from textual.widgets import Button, Input, Label

from chatapp.config import MAX_TEMPERATURE, MAX_TOKENS, Settings
from chatapp.errors import ChatappError, ConfigError
from chatapp.ui.screens.dialog import Dialog

_DEFAULTS = Settings()


@dataclass(frozen=True)
class Sampling:
    temperature: float
    max_tokens: int
    think: str = "on"
    """"on", "off" or a budget in tokens (chatapp.engine.chat.thoughts.Thinking.set_mode)."""
    top_k: int = _DEFAULTS.top_k
    top_p: float = _DEFAULTS.top_p
    min_p: float = _DEFAULTS.min_p
    seed: int = _DEFAULTS.seed

    def sampler(self) -> dict[str, float | int]:
        """The values the engine's GenerationSettings takes (all but `think`)."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "think"}

    def describe(self) -> str:
        seed = "random" if self.seed < 0 else str(self.seed)
        return (f"temperature {self.temperature:g}, max tokens {self.max_tokens:,}, top-k {self.top_k}, "
                f"top-p {self.top_p:g}, min-p {self.min_p:g}, seed {seed}")


SAMPLER_FIELDS: tuple[tuple[str, str, type], ...] = (
    ("temperature", f"Temperature (0 = greedy, up to {MAX_TEMPERATURE:g})", float),
    ("max_tokens", f"Max tokens a reply (1 to {MAX_TOKENS:,})", int),
    ("top_k", "Top-k (0 = off)", int),
    ("top_p", "Top-p (0 to 1; 1 = off)", float),
    ("min_p", "Min-p (0 to 1; 0 = off)", float),
    ("seed", "Seed (-1 = random each reply)", int),
)
"""Each sampler field the dialog asks for: its Sampling name, its label and its type."""


def checked_sampling(values: dict[str, str], current: Sampling) -> Sampling:
    """`current` with the typed `values` (by field name) read and validated as the config file's
    are; raises ConfigError in one line naming the field."""
    typed = {}
    for name, label, kind in SAMPLER_FIELDS:
        if name not in values:
            continue
        text = values[name].strip()
        try:
            typed[name] = kind(text)
        except ValueError:
            what = "a whole number" if kind is int else "a number"
            raise ConfigError(f"{name.replace('_', ' ')} must be {what}, got {text!r}") from None
    settings = _DEFAULTS.replace(**{**current.sampler(), **typed})  # raises ConfigError on a value out of range
    return Sampling(**{**{f: getattr(settings, f) for f in current.sampler()}, "think": current.think})


class SamplingScreen(Dialog[Sampling | None]):
    FRAME_TITLE = "Sampling"
    FRAME = VerticalScroll  # at 80x24 a thinking model's seven fields and the buttons are 22 rows

    DEFAULT_CSS = """
    SamplingScreen > #dialog { width: 76; }
    SamplingScreen #fields { grid-size: 2; grid-gutter: 0 2; grid-rows: 4; height: auto; }
    SamplingScreen .field { height: 4; }
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
        with Grid(id="fields"):
            for name, label, kind in SAMPLER_FIELDS:
                value = getattr(self.current, name)
                with Vertical(classes="field"):
                    yield Label(label)
                    yield Input(f"{value:g}" if kind is float else str(value), id=name.replace("_", "-"),
                                type="number" if kind is float else "integer")
            if self.check_think is not None:
                with Vertical(classes="field"):
                    yield Label("Thinking: on, off, or a budget")
                    yield Input(self.current.think, id="think")
        yield Label("", id="sampling-error", markup=False)  # it quotes what was typed
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
        values = {name: self.query_one(f"#{name.replace('_', '-')}", Input).value for name, _, _ in SAMPLER_FIELDS}
        try:
            checked = checked_sampling(values, self.current)
            think = self.current.think
            if self.check_think is not None:
                think = self.check_think(self.query_one("#think", Input).value)
        except ConfigError as exc:
            problem = exc.message
        except ChatappError as exc:
            problem = exc.one_line()
        else:
            self.dismiss(Sampling(**{**checked.sampler(), "think": think}))
            return
        self.query_one("#sampling-error", Label).update(problem)
