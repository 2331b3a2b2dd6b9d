"""The shape every reply must have from the next turn (the palette's "Reply shape", `/schema`):
a JSON schema typed as JSON text or in llm's concise form (`name, age int, bio: one sentence`),
or a file's name, read by chatapp.engine.shape as `ask --schema` reads it; or GBNF rules (or a
`.gbnf` file) as `ask --grammar` takes them. Bad input is one line in the dialog and nothing changes."""

from __future__ import annotations

import json
from typing import Literal

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal
from textual.widgets import Button, Label, TextArea

from chatapp.engine.shape import ReplyShape, gbnf_shape, grammar_shape, schema_shape
from chatapp.errors import ChatappError
from chatapp.ui.screens.dialog import Dialog

OFF = "off"
"""What the dialog (or `/schema off`) answers to take the shape away."""
MASK = "mask"
"""`/schema mask` (or the palette's entry): count the grammar's mask per reply token, or stop."""


def read_shape(text: str) -> ReplyShape:
    """`text` as a reply shape, by chatapp.engine.shape's own rules; ChatappError in one line: a
    `.gbnf` file's name or GBNF rules (`root ::= ...`) as a grammar, else a schema."""
    given = text.strip()
    if given.endswith(".gbnf") and "\n" not in given:
        return grammar_shape(given)
    if "::=" in given and not given.startswith("{"):
        return gbnf_shape(given)
    return schema_shape(given)


def shape_error(exc: ChatappError) -> str:
    """The shape module's line without the CLI option it names."""
    return exc.message.removeprefix("--schema: ").removeprefix("--schema ").removeprefix("--grammar ")


def shape_text(shape: ReplyShape | None) -> str:
    """The current shape as the dialog shows it to edit: its schema as JSON or its GBNF, else nothing."""
    if shape is None:
        return ""
    if shape.schema is None:
        return shape.gbnf
    return json.dumps(shape.schema, indent=2, ensure_ascii=False)


class ReplyShapeScreen(Dialog[ReplyShape | Literal["off"] | None]):
    """Dismisses with the shape read, OFF to clear it, or None when cancelled."""

    FRAME_TITLE = "Reply shape"
    BINDINGS = [Binding("ctrl+s", "save", "Save", priority=True)]

    DEFAULT_CSS = """
    ReplyShapeScreen #shape-help { width: 1fr; }
    ReplyShapeScreen TextArea { height: 10; }
    ReplyShapeScreen #shape-error { color: $error; height: auto; }
    ReplyShapeScreen Horizontal { height: auto; align-horizontal: right; }
    ReplyShapeScreen Button { margin-left: 1; }
    """

    def __init__(self, shape: ReplyShape | None) -> None:
        super().__init__()
        self.shape = shape

    def compose_body(self) -> ComposeResult:
        yield Label("Every reply from the next turn is a JSON value of this schema: JSON text, the concise form "
                    "(name, age int, bio: one sentence) or a file; or GBNF rules from `root ::= ...`, or a .gbnf file. "
                    "Ctrl+S saves, Esc cancels.", id="shape-help")
        yield TextArea(shape_text(self.shape), id="shape-text", soft_wrap=True)
        yield Label("", id="shape-error", markup=False)  # it quotes what was typed
        with Horizontal():
            yield Button("Cancel", id="cancel")
            yield Button("No shape", id="off", disabled=self.shape is None)
            yield Button("Save", id="save", variant="primary")

    def on_mount(self) -> None:
        box = self.query_one(TextArea)
        box.focus()
        box.select_all()  # the schema now set: typing replaces it, an arrow key edits it

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "save":
            self.action_save()
        elif event.button.id == "off":
            self.dismiss(OFF)
        else:
            self.action_close()

    def action_save(self) -> None:
        text = self.query_one(TextArea).text
        if not text.strip():  # an empty box: no shape
            self.dismiss(OFF)
            return
        try:
            shape = read_shape(text)
        except ChatappError as exc:
            self.query_one("#shape-error", Label).update(shape_error(exc))
            return
        self.dismiss(shape)
