"""Tool calls and their results in the transcript, each as a message of its own.

A reply that is a call (chatapp.engine.tools.calls) is drawn as the tool's name and its full
arguments in a code block, not as the JSON or markers the model wrote. A result is a message of
its own ("tool" in the tree), drawn as plain text: it is data from outside (a file, a server),
so any markup or escape in it is shown, never obeyed.
"""

from __future__ import annotations

import re

from textual.widgets import Static

from chatapp.engine.tools.calls import parse_calls
from chatapp.format import visible_text

_TICKS = re.compile(r"`+")


def fenced(text: str) -> str:
    """`text` in a Markdown code block no line of it can close (its fence is longer than any run
    of backticks inside), so the Markdown shows it verbatim."""
    longest = max((len(run) for run in _TICKS.findall(text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}\n{text}\n{fence}"


def call_markdown(reply: str) -> str | None:
    """What the transcript shows of a reply that calls tools (None: it calls none): the text
    around the calls, then each call's tool and arguments, verbatim in a code block."""
    calls, text = parse_calls(reply)
    if not calls:
        return None
    shown = "\n\n".join(f"{call.name} {call.pretty_arguments()}" for call in calls)
    said = "calls a tool" if len(calls) == 1 else f"calls {len(calls)} tools"
    return (f"{text}\n\n" if text else "") + f"*{said}:*\n\n" + fenced(shown)


class ToolResult(Static):
    """A tool's result (a "tool" message of the path), as plain text."""

    message_id = ""
    position = siblings = 1

    def __init__(self, text: str, note: str = "") -> None:
        super().__init__(visible_text(text) or "(empty result)", markup=False, classes="message")
        self.note = note
        """What the title says after "tool": the tool and its size while the turn runs, else ""."""
        self.border_title = f"tool · {note}" if note else "tool"
