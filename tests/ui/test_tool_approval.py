"""The approval dialog shows the tool, its server and the full arguments as plain text, and
answers once, always or deny; Esc and Enter alone never run a tool."""

from __future__ import annotations

from textual.app import App
from textual.widgets import Static

from chatapp.engine.tools.spec import ToolCall, ToolSpec
from chatapp.ui.screens.tool_approval import ToolApprovalScreen

SPEC = ToolSpec("write_note", "Write a note.", {"type": "object"}, "notes")
LONG = {"path": "[bold]not markup[/bold] \x1b[31m", "lines": [f"line {i} " + "x" * 60 for i in range(120)]}


class Host(App):
    def __init__(self) -> None:
        super().__init__()
        self.results: list[object] = []

    def ask(self, call: ToolCall, spec: ToolSpec = SPEC) -> ToolApprovalScreen:
        screen = ToolApprovalScreen(call, spec)
        self.push_screen(screen, self.results.append)
        return screen


async def test_the_full_arguments_are_shown_as_plain_text():
    app = Host()
    async with app.run_test(size=(100, 30)) as pilot:
        screen = app.ask(ToolCall("write_note", LONG))
        await pilot.pause()
        shown = str(screen.query_one("#arguments-text", Static).render())
        assert shown == screen.arguments == ToolCall("write_note", LONG).pretty_arguments()
        assert "[bold]not markup[/bold]" in shown and "line 119 " in shown  # nothing cut, nothing obeyed
        assert "write_note from notes" in str(screen.query_one("Label").render())
        await pilot.press("enter")  # the focus is on Deny
        await pilot.pause()
        assert app.results == ["deny"]


async def test_keys_answer_once_always_and_escape_denies():
    app = Host()
    async with app.run_test(size=(100, 30)) as pilot:
        for key, answer in (("o", "once"), ("a", "always"), ("d", "deny"), ("escape", None)):
            app.ask(ToolCall("write_note", {"path": "a"}))
            await pilot.pause()
            await pilot.press(key)
            await pilot.pause()
            assert app.results[-1] == answer


async def test_a_long_description_is_cut_at_a_word_and_says_so():
    """The reference filesystem server's descriptions run to several sentences; cut mid-word, the
    dialog read "(... This tool is essential for understand)"."""
    words = "Get a detailed listing of all files and directories in a specified path. " * 6
    app = Host()
    async with app.run_test(size=(100, 30)) as pilot:
        screen = app.ask(ToolCall("list_directory", {"path": "/tmp"}), ToolSpec("list_directory", words, {}, "files"))
        await pilot.pause()
        label = str(screen.query_one("Label").render())
        about = label.split(" (", 1)[1].rsplit(") with these arguments:", 1)[0]
        assert about.endswith(" …") and words.startswith(about.removesuffix(" …"))
        assert about.removesuffix(" …").split()[-1] in words.split()  # a whole word before the cut
        await pilot.press("d")
        screen = app.ask(ToolCall("x", {}), ToolSpec("x", "x" * 5000 + "\n\x1b[2J", {}, "hostile"))
        await pilot.pause()
        label = str(screen.query_one("Label").render())  # one word of 5,000: cut inside it, not dropped
        assert f"x from hostile ({'x' * 198} …) with these arguments:" in label and "\x1b" not in label
