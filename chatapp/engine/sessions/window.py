"""Where a resumed transcript's context window can start, found without tokenizing what can't fit.

A saved transcript can be far larger than the context: years of turns, or a 100 MB message
edited into the database. Placing the window by tokenizing all of it costs time and memory in
proportion to the transcript (llama.cpp's tokens, then each one described, in every attempt
of the placement's bisection). But no token covers more than MAX_CHARS_PER_TOKEN characters
of text, so text longer than n_ctx x MAX_CHARS_PER_TOKEN characters is more than n_ctx
tokens: the window can't start before the last turn from which the messages to the end are
within that. Only the turns from there on are ever tokenized.

MAX_CHARS_PER_TOKEN is measured, with room to spare: the longest any token covers is 64
characters on SmolLM2 (a run of 64 spaces or dashes) and 31 on gemma-3 (newlines). A
vocabulary with longer pieces would only see such text leave the window a little early.
"""

from __future__ import annotations

from collections.abc import Sequence

from chatapp.engine.chat.engine import Engine
from chatapp.engine.events import Message

MAX_CHARS_PER_TOKEN = 256


def _chars(message: Message) -> int:
    return len(message.content) + (len(message.context.text) if message.context is not None else 0)


def earliest_start(messages: Sequence[Message], n_ctx: int) -> int:
    """The first message at which the window could start: a turn's user message (or the first
    after the system prompt), or len(messages) when not even the last turn can fit."""
    n_system = 1 if messages and messages[0].role == "system" else 0
    budget = n_ctx * MAX_CHARS_PER_TOKEN - (_chars(messages[0]) if n_system else 0)
    total, floor = 0, n_system
    for index in range(len(messages) - 1, n_system - 1, -1):
        total += _chars(messages[index])
        if total > budget:
            floor = index + 1
            break
    if floor == n_system:
        return n_system
    return next((i for i in range(floor, len(messages)) if messages[i].role == "user"), len(messages))


def refit_from(engine: Engine, floor: int, before: int) -> int:
    """Place the engine's window again for its n_ctx (Engine.refit_window), considering only the
    turns from `floor` on: the bisection then tokenizes nothing that cannot fit. Returns how
    many turns came back into the window against `before`, the window as saved (negative:
    how many left it)."""
    engine.place_window(before)
    return engine.refit_window(floor)
