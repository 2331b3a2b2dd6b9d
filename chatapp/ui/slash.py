"""Peers' chat commands typed in the composer: Ollama's `/bye`, `/?` and `/set`, llama-cli's
`/exit`, the `/help`, `/quit` and `/clear` most REPLs answer. They run the app's own action
instead of going to the model as a question kept in the session forever. An unknown `/word`
alone is never sent: one line says so and the text stays in the composer. Two slashes send a
message that really starts with one (`//bye` sends "/bye"), as in `chatapp ask`
(chatapp.commands.peer_words). `/set NAME VALUE` sets a sampler value at once, as Ollama's
`/set parameter NAME VALUE` does; `/schema TEXT` sets the reply shape and `/schema off` clears
it. `/attach` and `/detach` are the attachments controller's."""

from __future__ import annotations

import re

from chatapp.errors import InputError

SLASH_WORD = re.compile(r"/(\w+|\?)")
"""A lone chat command as peers write them: a slash and one word, or `/?`."""

ACTIONS = {
    "/help": "help", "/?": "help",
    "/bye": "quit", "/exit": "quit", "/quit": "quit",
    "/clear": "new_chat", "/new": "new_chat",
    "/set": "sampling",
    "/schema": "reply_shape",
}
"""Each peer command and the app action it runs (ChatApp.action_<name>)."""


SET_NAMES = {"temperature": "temperature", "temp": "temperature", "max_tokens": "max_tokens",
             "num_predict": "max_tokens", "n_predict": "max_tokens", "top_k": "top_k", "top_p": "top_p",
             "min_p": "min_p", "seed": "seed"}
"""What `/set` takes, under Ollama's, llama.cpp's and the OpenAI API's names for each."""


def slash_action(text: str) -> str | None:
    """The action a whole composer text names (None: it is a message or another command).
    `/set` with values sets them at once (`sampling('temperature 0.2')`, set_values)."""
    words = text.split()
    if len(words) > 1 and words[0].lower() == "/set":
        return f"sampling({' '.join(words[1:])!r})"
    if len(words) > 1 and words[0].lower() == "/schema":  # the rest as typed: a schema may span lines
        return f"reply_shape({text.strip()[len(words[0]):].strip()!r})"
    return ACTIONS.get(text.strip().lower())


def set_values(typed: str) -> dict[str, str]:
    """`/set`'s words as {setting: value}: Ollama's `parameter temperature 0.2`, `temperature 0.2
    top_k 20` or `temperature=0.2`; raises InputError in one line on a name it does not know or a
    name without a value."""
    words = typed.replace("=", " ").split()
    if words[:1] == ["parameter"]:
        words = words[1:]
    if not words or len(words) % 2:
        raise InputError(f"/set takes a setting and its value, e.g. /set temperature 0.2 (got {typed!r})")
    values = {}
    for name, value in zip(words[::2], words[1::2]):
        if name.lower() not in SET_NAMES:
            raise InputError(f"/set knows {', '.join(sorted(set(SET_NAMES.values())))}, not {name!r}; "
                             "/set alone opens the sampling dialog")
        values[SET_NAMES[name.lower()]] = value
    return values


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
