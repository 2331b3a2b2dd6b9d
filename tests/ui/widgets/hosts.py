"""The tiny host App each widget test draws its widget in (with the shipped themes, as the real app
has them), reading what it drew, and running a real turn to feed it."""

from __future__ import annotations

from dataclasses import dataclass

from rich.text import Text
from textual.app import App, ComposeResult
from textual.containers import Vertical
from textual.widget import Widget
from textual.widgets import Static

from chatapp.config import Settings
from chatapp.engine.chat import prompt_view
from chatapp.engine.chat.engine import Engine
from chatapp.engine.events import PrefillDone, TextDelta, TurnDone
from chatapp.engine.stats import TurnRecord
from chatapp.ui.themes import DEFAULT_THEME, register_themes


SETTINGS = Settings(n_ctx=1024, temperature=0.0, max_tokens=16)


@dataclass
class Turn:
    events: list
    record: TurnRecord
    view: list[prompt_view.PromptToken]

    @property
    def prefill(self) -> PrefillDone:
        return next(e for e in self.events if isinstance(e, PrefillDone))

    @property
    def deltas(self) -> list[TextDelta]:
        return [e for e in self.events if isinstance(e, TextDelta)]


def run_turn(engine: Engine, text: str) -> Turn:
    events = list(engine.send(text))
    assert isinstance(events[-1], TurnDone)
    return Turn(events, events[-1].record, events[-1].view)


@dataclass
class Session:
    engine: Engine
    turns: list[Turn]
    """Two turns, then one after a system-prompt change, whose prefix reuse broke."""


class Host(App):
    """Hosts widgets with the shipped themes registered, as the real app does."""

    def __init__(self, themes, *widgets: Widget) -> None:
        self.themes = themes
        self.widgets = widgets
        super().__init__()

    def get_theme_variable_defaults(self) -> dict[str, str]:
        return self.themes.variable_defaults()

    def compose(self) -> ComposeResult:
        with Vertical():
            yield from self.widgets

    def on_mount(self) -> None:
        register_themes(self, self.themes)
        self.theme = DEFAULT_THEME


def colour_of(app: App, name: str) -> str:
    return app.theme_variables[name]


def styles_over(text: Text, start: int, end: int) -> list:
    return [span.style for span in text.spans if span.start <= start and span.end >= end]


def static_text(widget: Widget, selector: str) -> Text:
    content = widget.query_one(selector, Static).content
    return content if isinstance(content, Text) else Text(str(content))
