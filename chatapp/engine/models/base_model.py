"""Base models: which models are not tuned for chat, and the plain format they are asked in.

A base model continues text; it was never taught a turn's end. Two things make one: the
catalog says so (`chat = false`, gemma-3-270m), or the GGUF has no chat template
(`tokenizer.chat_template`), so no format of turns came with it. `base_model_reason` is the one
decision: the CLI (`models list`, `models info`, `ask`) and the TUI (header, picker) ask it.

Such a model is asked in `role: content` paragraphs ending with `assistant:`, and its reply
stops where it starts the next paragraph of a turn (`FALLBACK_STOPS`): otherwise it goes on to
write the user's next line and its own answer to it, until max tokens.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

ROLES = ("user", "assistant", "system", "tool")
FALLBACK_STOPS = tuple(f"\n{role}:" for role in ROLES)
"""A new line opening a turn of the fallback format ends the reply (`\n\nuser:` holds `\nuser:`)."""
NOT_CHAT_TUNED = "a base model, not tuned for chat: it continues the text it is given rather than answering"
NO_TEMPLATE = ("a base model as far as chatapp can tell: its GGUF has no chat template, so it is asked in plain "
               "'user:' / 'assistant:' text")
"""Both read after "<model> is ", in a notice, or alone as the reason in a list."""


def base_model_reason(path: Path | str | None = None, *, chat: bool | None = None,
                      template: str | None = None) -> str | None:
    """Why the model is a base model, in a phrase; None for a chat model.

    `chat`: the catalog's `chat` flag when the caller holds the entry (found by the file's name
    otherwise). `template`: the chat template when the caller has it (read from the file's
    header otherwise; a file that cannot be read is not called a base model on that account)."""
    if chat is None and path is not None:
        chat = catalog_chat_flag(Path(path).name)
    if chat is False:
        return NOT_CHAT_TUNED
    if template is None and path is not None:
        template = _header_template(Path(path))
    if template is not None and not template.strip():
        return NO_TEMPLATE
    return None


def is_base_model(path: Path | str | None = None, *, chat: bool | None = None, template: str | None = None) -> bool:
    return base_model_reason(path, chat=chat, template=template) is not None


def catalog_chat_flag(file_name: str | None = None, *, name: str | None = None) -> bool | None:
    """The catalog's `chat` for the entry whose file is `file_name` (or whose name is `name`);
    None for a model it doesn't list."""
    from chatapp.engine.models.catalog import load_catalog

    entry = next((e for e in load_catalog().entries if e.file == file_name or e.name == name), None)
    return None if entry is None else entry.chat


def _header_template(path: Path) -> str | None:
    """The GGUF's chat template, "" when it has none, None when the header cannot be read."""
    from chatapp.engine.models.gguf_header import HeaderError, read_header
    from chatapp.engine.models.template import TEMPLATE_KEY

    try:
        value = read_header(path, check_data=False).metadata.get(TEMPLATE_KEY)
    except (HeaderError, OSError):
        return None
    return value if isinstance(value, str) else ""


def render_fallback(messages: Sequence[Mapping[str, str]], *, add_generation_prompt: bool) -> str:
    """The conversation as `role: content` paragraphs; with `add_generation_prompt`, `assistant:`
    after them, which the reply continues."""
    text = "".join(f"{m['role']}: {m['content']}\n\n" for m in messages)
    return text + ("assistant:" if add_generation_prompt else "")
