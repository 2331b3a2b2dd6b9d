"""The prompt as the model saw it: each cached token with its role and where it came from.

Roles come from rendering the chat template one message at a time: text that belongs to a
message's content takes the message's role; the rest (markers such as <|im_start|>user)
is template.
"""

from __future__ import annotations

from dataclasses import dataclass

from chatapp.engine.events import Message
from chatapp.engine.tokens import Token, describe

ROLES = ("system", "user", "assistant", "template")


@dataclass(frozen=True)
class PromptToken:
    token: Token
    role: str
    origin: str
    """cached (reused from the KV cache), prefilled (computed this turn) or generated."""


def role_of_chars(chat, messages: list[Message]) -> list[str]:
    """The role of every character of the templated prompt for `messages`."""
    full = chat.render(messages, add_generation_prompt=True)
    roles = ["template"] * len(full)
    start = 0
    for i, message in enumerate(messages):
        prefix = chat.render(messages[: i + 1], add_generation_prompt=False)
        end = len(prefix) if full.startswith(prefix) else len(full)
        at = full.find(message.content, start, end) if message.content else -1
        if at >= 0:
            roles[at: at + len(message.content)] = [message.role] * len(message.content)
            start = at + len(message.content)
        start = max(start, min(end, len(full)))
    return roles


def build(chat, prompt_messages: list[Message], prompt_tokens: int, cached_tokens: int) -> list[PromptToken]:
    """Describe every token now in the KV cache for the turn that just ran."""
    runtime = chat.runtime
    ids = runtime.kv_tokens
    tokens = describe(runtime, ids)
    roles = role_of_chars(chat, prompt_messages)
    pos = 0
    bos_added = tokens and ids[0] == runtime.bos_id and runtime.adds_bos
    if bos_added and not chat.render(prompt_messages).startswith(tokens[0].piece):
        pos = -len(tokens[0].piece)  # the tokenizer added a BOS the template text lacks
    view = []
    for i, token in enumerate(tokens):
        if i < cached_tokens:
            origin = "cached"
        elif i < prompt_tokens:
            origin = "prefilled"
        else:
            origin = "generated"
        if token.special:
            role = "template"
        elif origin == "generated":
            role = "assistant"
        else:
            role = roles[pos] if 0 <= pos < len(roles) else "template"
        view.append(PromptToken(token, role, origin))
        pos += len(token.piece)
    return view


def role_counts(view: list[PromptToken]) -> dict[str, int]:
    counts = dict.fromkeys(ROLES, 0)
    for item in view:
        counts[item.role] += 1
    return counts
