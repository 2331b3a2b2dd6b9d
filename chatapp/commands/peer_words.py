"""Chat commands from other programs typed as a whole `ask` prompt.

`ollama run` leaves its chat on `/bye`, llama-cli and many REPLs on `/exit` or `/quit`, and
they answer `/help` or `/?`. `ask` sends one prompt and ends by itself, so such a prompt is
never meant for the model: it is refused in one line (before any model loads) that says what
`ask` does, rather than answered and kept in a session. A prompt that really starts with a
slash is written with two (`//bye` asks "/bye"). Plain words (`exit`, `quit`) are questions
like any other: someone may ask what they mean.
"""

from __future__ import annotations

from chatapp.errors import InputError
from chatapp.ui.slash import SLASH_WORD


def as_prompt(prompt: str) -> str:
    """The prompt to send: `//text` as `/text`; InputError for a lone slash command."""
    text = prompt.strip()
    if text.startswith("//"):
        return prompt.replace("//", "/", 1)
    if SLASH_WORD.fullmatch(text):
        raise InputError(f"{text!r} reads as a chat command, and ask has none: it sends its prompt to the model, "
                         "prints the reply and ends by itself (the chat's commands are in chatapp chat, F1); "
                         f"to ask the text itself, write it with two slashes: '/{text}'")
    return prompt
