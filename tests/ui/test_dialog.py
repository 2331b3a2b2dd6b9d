"""One frame for every modal: each ModalScreen in chatapp.ui.screens is a Dialog, and Esc closes
any of them with None."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
from pathlib import Path
from types import SimpleNamespace

import pytest
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.color import Color
from textual.screen import ModalScreen
from textual.widgets import Input, Label

import chatapp.ui.screens
from chatapp.engine.chat.tree import MessageTree
from chatapp.engine.events import Message
from chatapp.engine.tools.spec import ToolCall, ToolSpec
from chatapp.errors import ChatappError
from chatapp.ui.screens.anatomy import AnatomyScreen
from chatapp.ui.screens.attach import AttachScreen, DetachScreen
from chatapp.ui.screens.attention import AttentionScreen
from chatapp.ui.screens.dialog import Dialog
from chatapp.ui.screens.help import HelpScreen
from chatapp.ui.screens.next_token import NextTokenScreen
from chatapp.ui.screens.reply_shape import ReplyShapeScreen
from chatapp.ui.screens.model_picker import ModelPickerScreen
from chatapp.ui.screens.sampling import Sampling, SamplingScreen
from chatapp.ui.screens.search import SearchScreen
from chatapp.ui.screens.session_changed import SessionChangedScreen
from chatapp.ui.screens.sessions import ConfirmScreen, NameScreen, SessionsScreen
from chatapp.ui.screens.system_prompt import SystemPromptScreen
from chatapp.ui.screens.tool_approval import ToolApprovalScreen
from chatapp.ui.screens.tree import TreeScreen
from chatapp.ui.shown import TreeSnapshot

FRAME_WORDS = ("align:", "border:", "background:", "padding:")
"""What only Dialog's CSS says about the frame; a dialog's own rule for `#dialog` sets sizes only."""


def modal_screens() -> list[type[ModalScreen]]:
    """Every ModalScreen subclass defined in a module of chatapp.ui.screens."""
    found = []
    for info in pkgutil.walk_packages(chatapp.ui.screens.__path__, "chatapp.ui.screens."):
        module = importlib.import_module(info.name)
        found += [cls for _, cls in inspect.getmembers(module, inspect.isclass)
                  if issubclass(cls, ModalScreen) and cls.__module__ == module.__name__ and cls is not Dialog]
    return found


def test_every_modal_screen_is_a_dialog() -> None:
    screens = modal_screens()
    assert len(screens) >= 13, screens  # the walk found them (13 when Dialog came)
    assert [cls.__name__ for cls in screens if not issubclass(cls, Dialog)] == []


@pytest.mark.parametrize("screen", modal_screens(), ids=lambda cls: cls.__name__)
def test_no_dialog_draws_a_frame_of_its_own(screen: type[Dialog]) -> None:
    css = screen.__dict__.get("DEFAULT_CSS", "")
    for selector, body in re.findall(r"([^{}]+)\{([^{}]*)\}", css):
        if "#dialog" in selector or selector.strip() == screen.__name__:
            assert not [word for word in FRAME_WORDS if word in body], (selector.strip(), body)
    assert "compose" not in screen.__dict__, "yield the body from compose_body; Dialog composes the frame"


@pytest.mark.parametrize("screen", modal_screens(), ids=lambda cls: cls.__name__)
def test_a_frame_title_shows_every_bracket_it_was_written_with(screen: type[Dialog]) -> None:
    """The titles are Textual markup: the attention view's "[ and ] one head" came out as
    " one head" (rich's escape leaves a bracket that is no tag alone; Textual read it as one)."""
    from textual.content import Content

    for written in (screen.FRAME_TITLE, screen.FRAME_SUBTITLE):
        plain = Content.from_markup(written).plain
        meant = written.replace("\\[", "[")
        assert plain.count("[") == meant.count("[") and plain.count("]") == meant.count("]"), (written, plain)


def test_help_writes_a_lone_letter_as_it_is_typed() -> None:
    """F1 said "Q Close" for the q key, which reads as Shift+Q."""
    from chatapp.ui.screens.help import key_label

    assert [key_label(k) for k in ("q", "ctrl+o", "f1,question_mark", "alt+p", "escape")] == [
        "q", "Ctrl+O", "F1 / ?", "Alt+P", "Esc"]


def test_the_frame_uses_theme_variables_only() -> None:
    assert not re.search(r"#[0-9a-fA-F]{3,8}\b|rgb\(|\b(red|blue|green|white|black)\b", Dialog.DEFAULT_CSS)
    assert "$primary" in Dialog.DEFAULT_CSS and "$warning" in Dialog.DEFAULT_CSS


class Ask(Dialog[str]):
    FRAME_TITLE = "Ask"

    def compose_body(self) -> ComposeResult:
        yield Label("Your name?", id="question")
        yield Input(id="answer")

    def on_mount(self) -> None:
        self.query_one(Input).focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.dismiss(event.value)


class Host(App):
    def __init__(self) -> None:
        super().__init__()
        self.results: list[object] = []

    def ask(self, screen: Dialog) -> None:
        self.push_screen(screen, self.results.append)


async def test_escape_dismisses_a_dialog_with_none() -> None:
    app = Host()
    async with app.run_test() as pilot:
        app.ask(Ask())
        await pilot.pause()
        frame = app.screen.query_one("#dialog")
        assert frame.border_title == "Ask" and frame.query_one("#question") and app.screen.focused.id == "answer"
        await pilot.press(*"ada", "enter")
        assert app.results == ["ada"]

        app.ask(Ask())
        await pilot.pause()
        await pilot.press("escape")  # with the Input focused
        await pilot.pause()
        assert app.results == ["ada", None]
        assert not isinstance(app.screen, Dialog)


async def test_the_title_comes_from_the_class_or_the_constructor_and_warning_tints_the_border() -> None:
    class Warn(Ask):
        TONE = "warning"

    app = Host()
    async with app.run_test() as pilot:
        app.ask(Warn("Given", "below"))
        await pilot.pause()
        frame = app.screen.query_one("#dialog")
        assert (frame.border_title, frame.border_subtitle) == ("Given", "below")
        assert frame.styles.border_top == ("round", Color.parse(app.get_css_variables()["warning"]))
        await pilot.press("escape")
        app.ask(Ask())
        await pilot.pause()
        frame = app.screen.query_one("#dialog")
        assert frame.styles.border_top == ("round", Color.parse(app.get_css_variables()["primary"]))


def every_dialog(tmp_path: Path) -> list[Dialog]:
    """One of each of chatapp's dialogs, built as the app builds them, on stand-in data."""
    (tmp_path / "a.txt").write_text("x")
    manager = SimpleNamespace(store=SimpleNamespace(directory=tmp_path, summaries=list),
                              state_size=lambda key: None)
    tree = MessageTree.from_messages([Message("user", "hello", id="aaaa0001"),
                                      Message("assistant", "hi", id="aaaa0002", parent="aaaa0001")])

    def no_capture(layer, stop):
        raise ChatappError("no model loaded")

    return [SessionsScreen(manager, None), NameScreen("Rename", "New name:", "old"), ConfirmScreen("Delete it?"),
            SystemPromptScreen("be brief"), SamplingScreen(Sampling(0.7, 512)), AttachScreen(tmp_path),
            DetachScreen(()), ModelPickerScreen([], tmp_path / "x.gguf", ["a note"]),
            SessionChangedScreen("It changed elsewhere"), HelpScreen([("Anywhere", [Binding("a", "b", "Do b")])]),
            TreeScreen(TreeSnapshot(tree)), AnatomyScreen(tmp_path / "missing.gguf"), AttentionScreen(no_capture),
            ToolApprovalScreen(ToolCall("add", {"a": 1}), ToolSpec("add", "Add.", {}, "test")),
            NextTokenScreen("lens", lambda index, stop: "no model loaded"), SearchScreen(manager),
            ReplyShapeScreen(None)]


async def test_escape_closes_each_of_chatapps_dialogs_with_none(tmp_path: Path) -> None:
    dialogs = every_dialog(tmp_path)
    assert {type(d) for d in dialogs} == set(modal_screens()), "a new dialog: add it here"
    app = Host()
    async with app.run_test(size=(100, 30)) as pilot:
        for dialog in dialogs:
            app.ask(dialog)
            await pilot.pause()
            assert app.screen is dialog
            assert app.screen.query_one("#dialog").border_title, type(dialog).__name__
            await pilot.press("escape")
            await pilot.pause()
            assert app.screen is not dialog, type(dialog).__name__
        assert app.results == [None] * len(dialogs)
