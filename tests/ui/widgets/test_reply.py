"""The reply widget: streaming renders only the tail, repaints only changed lines, lays out
rarely, and what it shows matches Rich's rendering of the whole document."""

from __future__ import annotations

import sys

import pytest
from textual.app import App, ComposeResult
from textual.containers import VerticalScroll

from chatapp.ui.themes import load_themes, register_themes
from chatapp.ui.widgets.reply import STREAM_STEP, Reply, split_finished

SAMPLES = [
    "Here is what I know:\n\n- **Lighthouses** guide ships.\n- Their lamps turn.\n\nKeepers once lived in them.",
    "```python\ndef f(x):\n\n    return x\n```\n\nThis sorts; `sorted` returns a new list.",
    "## The sea\n\nWaves roll in,\ngrey and slow.\n\n1. Tide\n2. Foam\n\n3. Salt\n\n---\n\nEnd.",
    "1. First\n\n2. Second\n\n3. Third item with **bold**\n\n> a quote\n\n> more\n\n"
    "| a | b |\n|---|---|\n| 1 | 2 |\n\nDone.",
    "- a\n\n  continued paragraph\n\n- b\n\n# Title\n\ntext with a [link](https://example.org)",
]


class Host(App):
    def __init__(self, reply: Reply) -> None:
        self.themes = load_themes()
        self.reply = reply
        super().__init__()
        register_themes(self, self.themes)
        self.theme = "chatapp-dark"

    def get_theme_variable_defaults(self) -> dict[str, str]:
        return self.themes.variable_defaults()

    def compose(self) -> ComposeResult:
        with VerticalScroll():
            yield self.reply


def shown(reply: Reply) -> list[str]:
    return [reply.render_line(y).text for y in range(len(reply._lines_for(reply.size.width)))]


@pytest.mark.parametrize("text", SAMPLES)
async def test_the_streamed_lines_are_rich_rendering_of_the_whole_reply(text):
    reply = Reply()
    async with Host(reply).run_test(size=(80, 60)) as pilot:
        reply.show(text, streaming=False)
        await pilot.pause()
        whole = shown(reply)
        reply.show(text, streaming=True)  # finished blocks and the tail rendered apart
        await pilot.pause()
        assert shown(reply) == whole
        assert len(whole) > 3


def test_the_tail_starts_after_the_last_blank_line_outside_a_fence():
    assert split_finished("one\n\ntwo") == ("one", "two")
    assert split_finished("```\na\n\nb") == ("", "```\na\n\nb")  # an open fence is one block
    assert split_finished("p\n\n```\na\n\nb\n```\n\nq") == ("p\n\n```\na\n\nb\n```", "q")
    assert split_finished("no blank line yet") == ("", "no blank line yet")


async def test_streaming_repaints_changed_lines_and_lays_out_once_per_step(monkeypatch):
    reply = Reply()
    layouts, regions = [], []
    original = Reply.refresh

    def spy(self, *args, layout=False, **kwargs):
        if sys._getframe(1).f_code is Reply.show.__code__:  # what the reply asks for, not Textual's own calls
            (layouts if layout else regions).append(args)
        return original(self, *args, layout=layout, **kwargs)

    words = " ".join(f"word{i}" for i in range(400))
    async with Host(reply).run_test(size=(80, 40)) as pilot:
        reply.show("", streaming=True)
        await pilot.pause()
        monkeypatch.setattr(Reply, "refresh", spy)
        for end in range(0, len(words), 24):  # a few tokens per update, as streaming sends them
            reply.show(words[:end + 24])
            await pilot.pause()
        rows = len(reply._lines_for(reply.size.width))
        assert rows > 3 * STREAM_STEP
        assert len(layouts) <= rows // STREAM_STEP + 2
        assert regions and all(args and args[0].height <= 3 for args in regions)  # just the lines that changed
        assert reply.size.height % STREAM_STEP == 0 and reply.size.height >= rows
        reply.show(words, streaming=False)
        await pilot.pause()
        assert reply.size.height == rows  # the final layout fits the text exactly
