"""Pick another model: catalog models and any other GGUF file in the model folders."""

from __future__ import annotations

from pathlib import Path

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Label, OptionList
from textual.widgets.option_list import Option

from chatapp.engine.models.discovery import LocalModel


def option_for(model: LocalModel, current: Path) -> Option:
    label = Text(model.name, style="bold")
    if model.entry is not None:
        label.append(f"  {model.entry.quantization} · {model.entry.description}")
    if model.path is None:
        label.append(f"  (not downloaded: chatapp models pull {model.name})", style="italic")
        return Option(label, id=f"missing:{model.name}", disabled=True)
    if model.path.resolve() == current.resolve():
        label.append("  (loaded)", style="italic")
    return Option(label, id=str(model.path))


class ModelPickerScreen(ModalScreen[str | None]):
    """Dismisses with the chosen GGUF path, or None."""

    BINDINGS = [Binding("escape", "cancel", "Cancel")]

    DEFAULT_CSS = """
    ModelPickerScreen { align: center middle; }
    ModelPickerScreen > Vertical {
        width: 90%; max-width: 110; height: auto; max-height: 80%;
        border: round $primary; background: $surface; padding: 0 1;
    }
    ModelPickerScreen OptionList { height: auto; max-height: 20; }
    """

    def __init__(self, models: list[LocalModel], current: Path) -> None:
        super().__init__()
        self.models = models
        self.current = current

    def compose(self) -> ComposeResult:
        with Vertical() as box:
            box.border_title = "Switch model"
            yield Label("Enter loads the model (the conversation carries over); Esc cancels.")
            yield OptionList(*[option_for(m, self.current) for m in self.models], id="models")

    def on_mount(self) -> None:
        self.query_one(OptionList).focus()

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        event.stop()
        self.dismiss(event.option.id)

    def action_cancel(self) -> None:
        self.dismiss(None)
