"""The active path of the conversation tree as the transcript draws it: each message with its
place among its siblings (‹ n/m ›). The branch controller, the turn worker and the sessions
controller all draw the path from this."""

from __future__ import annotations

from chatapp.engine.chat.engine import Engine
from chatapp.ui.widgets.transcript import Shown


def shown_path(engine: Engine) -> tuple[list[Shown], int]:
    """The active path as the transcript draws it, and how many of its first messages are outside
    the context window. A copy of the tree is read: call it where no turn changes it."""
    tree = engine.tree
    path = []
    for message in tree.path():
        family, index = tree.siblings(message.id)
        path.append(Shown(message, index + 1, len(family),
                          engine.reply_probs(message.id) if message.role == "assistant" else ()))
    n_system = len(engine.messages) - len(path)
    return path, max(engine.window_start - n_system, 0)
