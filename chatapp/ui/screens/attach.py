"""Attachments: a file picker (Textual has no file dialog: a DirectoryTree in a modal), and the
list of what is attached, to remove one."""

from __future__ import annotations

from pathlib import Path

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.widgets import DirectoryTree, Input, Label, OptionList
from textual.widgets.option_list import Option

from chatapp.engine.retrieval.attachments import Planned
from chatapp.format import one_line_text
from chatapp.ui.screens.dialog import Dialog

class AttachScreen(Dialog[Path | None]):
    """Dismisses with the file or folder to attach, or None.

    Enter on a file in the tree picks it; F picks the folder under the cursor; or type a path
    in the box and press Enter."""

    FRAME_TITLE = "Attach a file or folder"
    BINDINGS = [Binding("f", "pick_folder", "Attach this folder", tooltip="Attach the highlighted folder")]
    DEFAULT_CSS = """
    AttachScreen > #dialog { max-width: 110; max-height: 85%; }
    AttachScreen DirectoryTree { height: 20; }
    """

    def __init__(self, start: Path) -> None:
        super().__init__()
        self.start = start

    def compose_body(self) -> ComposeResult:
        yield Label("Enter on a file attaches it · F attaches the highlighted folder · "
                    "or type a path and press Enter · Esc cancels")
        yield Input(placeholder=f"a path (relative to {self.start})", id="attach-path")
        yield FileTree(self.start, id="attach-tree")

    def on_mount(self) -> None:
        self.query_one(DirectoryTree).focus()

    def on_directory_tree_file_selected(self, event: DirectoryTree.FileSelected) -> None:
        event.stop()
        self.dismiss(Path(event.path))

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        if event.value.strip():
            self.dismiss(self.start / Path(event.value.strip()).expanduser())

    def action_pick_folder(self) -> None:
        tree = self.query_one(DirectoryTree)
        node = tree.cursor_node
        if self.focused is tree and node is not None and node.data is not None:
            path = Path(node.data.path)
            self.dismiss(path if path.is_dir() else path.parent)


class FileTree(DirectoryTree):
    """The DirectoryTree with each file name on one line and its control characters escaped: a
    name can hold an escape sequence (setting the terminal's title or clipboard) or a line break
    (of which DirectoryTree showed the first line only)."""

    def process_label(self, label: str | Text) -> Text:
        return super().process_label(one_line_text(label if isinstance(label, str) else label.plain))


def option_for(plan: Planned) -> Option:
    label = Text(one_line_text(plan.attachment.name), style="bold")  # a name may hold escapes
    how = "whole" if plan.whole else f"{len(plan.chunks):,} chunks"
    label.append(f"  {plan.tokens:,} token{'' if plan.tokens == 1 else 's'} · {how}")
    return Option(label, id=plan.attachment.name)


class DetachScreen(Dialog[str | None]):
    """Dismisses with the name of the attachment to remove, or None."""

    FRAME_TITLE = "Attachments"
    BINDINGS = [Binding("delete", "remove", "Remove")]
    DEFAULT_CSS = """
    DetachScreen > #dialog { max-width: 110; max-height: 85%; }
    DetachScreen OptionList { height: auto; max-height: 20; }
    """

    def __init__(self, plans: tuple[Planned, ...]) -> None:
        super().__init__()
        self.plans = plans

    def compose_body(self) -> ComposeResult:
        yield Label("Enter or Delete removes the highlighted one (what earlier turns used stays in them); "
                    "Esc closes.")
        yield OptionList(*[option_for(plan) for plan in self.plans], id="attachments")

    def on_mount(self) -> None:
        self.query_one(OptionList).focus()

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        event.stop()
        self.dismiss(event.option.id)

    def action_remove(self) -> None:
        options = self.query_one(OptionList)
        if options.highlighted is not None:
            self.dismiss(options.get_option_at_index(options.highlighted).id)
