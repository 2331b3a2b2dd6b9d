"""Rendering a conversation that has no user message yet (the system prompt alone, before the
first turn) with a template that refuses such a list.

chatapp renders the system prompt on its own for figures shown before the first question (the
branch's tokens, the predicted re-prefill, typing-ahead's prefix). Some real templates raise when
no user message is there (Qwen3.5's "No user query found in messages", its line 79): the
conversation itself is fine, only the side render is refused. Also an empty reply, which some
templates refuse (Ministral's), is rendered as one space rather than stopping the chat. Such a render is done instead
with two different probe questions after the system prompt; what the two prompts share is the
text that comes before any question, which is what the next turn's prompt starts with.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import replace

from chatapp.engine.events import Message
from chatapp.errors import ModelError

PROBES = ("Probe question one?", "A second, different question.")
"""Two questions whose first tokens differ: what their prompts share ends where a question starts."""


def render_userless(render: Callable[[Sequence[Message], bool], str], messages: Sequence[Message],
                    add_generation_prompt: bool) -> str:
    """`render(messages, add_generation_prompt)`, or, when the template refuses a list without a
    user message, the text that every prompt of these messages plus a question starts with."""
    try:
        return render(messages, add_generation_prompt)
    except ModelError:
        if any(m.role == "assistant" and not m.content.strip() for m in messages):
            # an empty reply (the model ended its turn at once), which Ministral's template refuses
            # ("Assistant message must have ... content"): kept as one space, the least text there is
            messages = [replace(m, content=" ") if m.role == "assistant" and not m.content.strip() else m
                        for m in messages]
            return render_userless(render, messages, add_generation_prompt)
        if any(m.role == "user" for m in messages) or not messages:
            raise
        probe = Message(role="user", content=PROBES[0])
        first = render([*messages, probe], False)
        second = render([*messages, replace(probe, content=PROBES[1])], False)
        return os.path.commonprefix([first, second])
