"""The one frame every modal is drawn in: a bordered box centred over the dimmed screen, its
title on the border, Esc closing it with None.

A dialog yields only its body (`compose_body`); the frame is composed around it here. Its size
is the frame's default (90% wide, at most 100 cells, as tall as its body, at most 90% of the
screen) unless the dialog overrides it in a small rule of its own, e.g.

    DEFAULT_CSS = "SamplingScreen > #dialog { width: 64; }"

A dialog asking before something that cannot be undone sets `TONE = "warning"`, which draws the
border in the theme's warning colour. Long reads set `FRAME = VerticalScroll`.
"""

from __future__ import annotations

from typing import ClassVar, Literal, TypeVar

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widget import Widget

T = TypeVar("T")

Tone = Literal["primary", "warning"]


class Dialog(ModalScreen[T]):
    """A modal screen dismissed with a `T`, or with None on Esc; subclasses write `compose_body`."""

    FRAME_TITLE: ClassVar[str] = ""
    """The title on the frame's border (markup), unless one is given to the constructor."""
    FRAME_SUBTITLE: ClassVar[str] = ""
    """The subtitle on the frame's lower border (markup), unless one is given to the constructor."""
    FRAME: ClassVar[type[Widget]] = Vertical
    """The frame's container: Vertical, or VerticalScroll for a dialog that scrolls as a whole."""
    TONE: ClassVar[Tone] = "primary"
    """The border's colour: the theme's primary, or its warning colour for a question that matters."""

    BINDINGS = [Binding("escape", "close", "Close")]

    DEFAULT_CSS = """
    Dialog { align: center middle; }
    Dialog > #dialog {
        width: 90%; max-width: 100; height: auto; max-height: 90%;
        border: round $primary; background: $surface; padding: 0 1;
        scrollbar-size-vertical: 1;
    }
    Dialog.-warning > #dialog { border: round $warning; }
    """

    def __init__(self, frame_title: str | None = None, frame_subtitle: str | None = None, *,
                 name: str | None = None, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(name=name, id=id, classes=classes)
        self.frame_title = self.FRAME_TITLE if frame_title is None else frame_title
        self.frame_subtitle = self.FRAME_SUBTITLE if frame_subtitle is None else frame_subtitle
        self.add_class(f"-{self.TONE}")

    def compose(self) -> ComposeResult:
        with self.FRAME(id="dialog") as frame:
            frame.border_title = self.frame_title or None
            frame.border_subtitle = self.frame_subtitle or None
            yield from self.compose_body()

    def compose_body(self) -> ComposeResult:
        """What the dialog shows inside its frame."""
        yield from ()

    def action_close(self) -> None:
        """Esc: closed without an answer (the same for a Cancel button)."""
        self.dismiss(None)
