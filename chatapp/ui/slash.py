"""Peers' chat commands typed in the composer: Ollama's `/bye`, `/?` and `/set`, llama-cli's
`/exit`, the `/help`, `/quit` and `/clear` most REPLs answer. They run the app's own action
instead of going to the model as a question kept in the session forever. An unknown `/word`
alone is never sent: one line says so and the text stays in the composer. Two slashes send a
message that really starts with one (`//bye` sends "/bye"), as in `chatapp ask`
(chatapp.commands.peer_words). `/attach` and `/detach` are the attachments controller's."""

from __future__ import annotations

import re

SLASH_WORD = re.compile(r"/(\w+|\?)")
"""A lone chat command as peers write them: a slash and one word, or `/?`."""

ACTIONS = {
    "/help": "help", "/?": "help",
    "/bye": "quit", "/exit": "quit", "/quit": "quit",
    "/clear": "new_chat", "/new": "new_chat",
    "/set": "sampling",
}
"""Each peer command and the app action it runs (ChatApp.action_<name>)."""


def slash_action(text: str) -> str | None:
    """The action a whole composer text names (None: it is a message or another command)."""
    return ACTIONS.get(text.strip().lower())


def unknown_command(text: str) -> str | None:
    """A line for a lone `/word` that is no command (None: send it)."""
    word = text.strip()
    if not SLASH_WORD.fullmatch(word) or word.lower() in ACTIONS:
        return None
    known = ", ".join(sorted({*ACTIONS, "/attach", "/detach"}))
    return f"{word} is not a chat command ({known}); to send it as text, start it with two slashes: /{word}"


def as_message(text: str) -> str:
    """What to send: `//text` as `/text`."""
    stripped = text.lstrip()
    return text[:len(text) - len(stripped)] + stripped[1:] if stripped.startswith("//") else text
