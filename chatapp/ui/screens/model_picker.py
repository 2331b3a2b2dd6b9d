"""Pick another model from every store on this machine (chatapp.engine.machine.model_fit),
grouped by source, filtered as you type, each with its quantization, size, parameters and
whether it fits here: a model that will not fit says so before it is loaded."""

from __future__ import annotations

from pathlib import Path

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.message import Message
from textual.widgets import Input, Label, OptionList
from textual.widgets.option_list import Option

from chatapp.engine.machine.model_fit import ModelRow
from chatapp.engine.models.sources import PREFIXES, SOURCE_TITLES, SOURCES
from chatapp.format import human_bytes, human_count, one_line_text
from chatapp.ui.screens.dialog import Dialog


class ModelsFound(Message):
    """What the app's model-list worker found, for the picker; `purpose`: "switch" (Ctrl+L) or
    "compare" (a second quant to compare the loaded model with)."""

    def __init__(self, rows: list[ModelRow], notes: list[str], error: str | None = None,
                 purpose: str = "switch") -> None:
        super().__init__()
        self.rows, self.notes, self.error, self.purpose = rows, notes, error, purpose


def option_for(row: ModelRow, current: Path) -> Option:
    label = Text(one_line_text(row.name), style="bold")
    figures = [row.quant or "?", human_bytes(row.size_bytes) if row.size_bytes else "?"]
    if row.n_params:
        figures.append(f"{human_count(row.n_params)} params")
    label.append("  " + " · ".join(figures))
    if row.base:  # as `models list` marks it: its replies continue text rather than answer
        label.append("  (base model, not for chat)", style="italic yellow")
    if row.path is None:
        reason = row.problem or f"not downloaded: chatapp models pull {row.name}"
        label.append(f"  ({one_line_text(reason)})", style="italic")
        return Option(label, id=f"missing:{row.name}", disabled=True)
    if row.problem:
        label.append(f"  (unusable: {one_line_text(row.problem)})", style="italic")
        return Option(label, id=f"broken:{row.name}", disabled=True)
    if Path(row.path).resolve() == current.resolve():
        label.append("  (loaded)", style="italic")
    if row.fits is False:
        label.append("  ✗ does not fit in memory at this context", style="bold red")
    return Option(label, id=row.path)


def options(rows: list[ModelRow], current: Path, query: str = "") -> list[Option]:
    """The rows whose name, source or quant holds every word of `query`, under their source's title."""
    words = query.lower().split()
    shown = []
    for source in SOURCES:
        group = [row for row in rows if row.source == source
                 and all(word in f"{row.name} {row.source} {row.quant or ''}".lower() for word in words)]
        if group:
            shown.append(Option(Text(SOURCE_TITLES[source], style="underline"), id=f"title:{source}", disabled=True))
            shown += [option_for(row, current) for row in group]
    return shown


class ModelPickerScreen(Dialog[str | None]):
    """Dismisses with the chosen model: a store's name for a model in another tool's store (so
    that the model is shown by the name the user can type back, not by its blob or file name),
    else its GGUF path; None when cancelled.

    As in fzf, LM Studio and VS Code's palette, the first match is always highlighted, Enter in
    the filter opens it, and the cursor moves over models only, never onto a group's title."""

    FRAME_TITLE = "Switch model"
    BINDINGS = [Binding("down", "to_list", show=False)]

    DEFAULT_CSS = """
    ModelPickerScreen > #dialog { max-width: 120; max-height: 85%; }
    ModelPickerScreen OptionList { height: auto; max-height: 24; }
    """

    HINT = "Type to filter; Enter loads the model (the conversation carries over); Esc cancels."

    def __init__(self, rows: list[ModelRow], current: Path, notes: list[str] | None = None, *,
                 title: str | None = None, hint: str | None = None) -> None:
        super().__init__(title)
        self.rows = rows
        self.current = current
        self.notes = notes or []
        self.hint = hint or self.HINT

    def compose_body(self) -> ComposeResult:
        yield Label(self.hint)
        yield Input(placeholder="filter: a name, a source, a quant", id="filter", select_on_focus=False)
        yield OptionList(*options(self.rows, self.current), id="models")
        if self.notes:
            yield Label(Text("\n".join(one_line_text(note) for note in self.notes[:3]), style="dim"),
                        id="notes")

    def on_mount(self) -> None:
        found = self.query_one(OptionList)
        found.focus()
        found.action_first()

    def on_input_changed(self, event: Input.Changed) -> None:
        event.stop()
        found = self.query_one(OptionList)
        found.clear_options()
        found.add_options(options(self.rows, self.current, event.value))
        found.action_first()  # the first match, never a title: Enter in the filter opens it

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        found = self.query_one(OptionList)
        option = found.highlighted_option
        if option is None or option.disabled:
            self.notify("no model matches the filter", severity="warning", timeout=3)
            return
        self.choose(option.id)

    def action_to_list(self) -> None:
        self.query_one(OptionList).focus()

    def on_key(self, event) -> None:
        """Printable keys typed while the list has focus go to the filter."""
        if event.is_printable and event.character and not isinstance(self.focused, Input):
            field = self.query_one("#filter", Input)
            field.focus()
            field.insert_text_at_cursor(event.character)
            event.stop()

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        event.stop()
        self.choose(event.option.id)

    def choose(self, option_id: str | None) -> None:
        """Dismiss with the model an option stands for (its id is the GGUF path): the store's name
        for a store's model; the path for others, and for the model already loaded (which the
        app then says is loaded, instead of loading it again)."""
        row = next((row for row in self.rows if row.path is not None and row.path == option_id), None)
        if (row is not None and row.source in PREFIXES and option_id is not None
                and Path(option_id).resolve() != self.current.resolve()):
            self.dismiss(row.name)
        else:
            self.dismiss(option_id)
