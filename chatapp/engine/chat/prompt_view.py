"""The prompt as the model saw it: each cached token with its role and where it came from.

Roles come from rendering the chat template one message at a time: text that belongs to a
message's content takes the message's role, except a retrieved block placed before a
question (attachment text, `Message.context`), which is "retrieved", and a reply that calls a
tool, which is "call" (its result is the "tool" message after it). With tools offered, the text
their schemas add to the prompt (what rendering without them lacks) is "tools". The rest
(markers such as <|im_start|>user) is template.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass

from chatapp.engine.events import Message, PromptToken
from chatapp.engine.tokens import Token
from chatapp.engine.tools.calls import parse_calls

ROLES = ("system", "user", "assistant", "retrieved", "template")
TOOL_ROLES = ("tools", "call", "tool")
"""The tools' roles: their schemas, a reply that calls one, a call's result. Counted only where
a prompt holds them (a chat without tools has none of them)."""


Render = Callable[..., str]
"""`render(messages, add_generation_prompt=...)`: the conversation through the chat template."""


@dataclass(frozen=True)
class ContentSpan:
    """Where one message's content, as the template received it, lies in the templated prompt."""

    start: int
    end: int
    message: Message

    @property
    def retrieved_end(self) -> int:
        """End of the retrieved block at the start of the content (== start when there is none)."""
        return self.start + (len(self.message.context.text) if self.message.context else 0)


def content_spans(render: Render, messages: Sequence[Message], *,
                  add_generation_prompt: bool = True) -> tuple[str, list[ContentSpan]]:
    """The templated prompt for `messages` (generation prompt added unless told) and each
    message's content span in it, found by rendering one more message at a time. A message
    whose content the template changed (trimmed, say) has no span: its text counts as template."""
    messages = list(messages)
    full = render(messages, add_generation_prompt=add_generation_prompt)
    spans, start = [], 0
    for i, message in enumerate(messages):
        prefix = render(messages[: i + 1], add_generation_prompt=False)
        end = len(prefix) if full.startswith(prefix) else len(full)
        content = message.as_template_input()["content"]
        at = full.find(content, start, end) if content else -1
        if at >= 0:
            spans.append(ContentSpan(at, at + len(content), message))
            start = at + len(content)
        start = max(start, min(end, len(full)))
    return full, spans


def is_call(text: str) -> bool:
    return bool(parse_calls(text)[0])


def inserted(bare: str, full: str) -> tuple[int, int]:
    """Where `full` holds what `bare` lacks: the span between their common start and common end."""
    limit = min(len(bare), len(full))
    start = next((i for i in range(limit) if bare[i] != full[i]), limit)
    end = next((i for i in range(limit - start) if bare[-1 - i] != full[-1 - i]), limit - start)
    return start, len(full) - end


def role_of_chars(render: Render, messages: list[Message], bare: Render | None = None) -> list[str]:
    """The role of every character of the templated prompt for `messages`; `bare` renders them
    without the tools `render` offers (None: no tools)."""
    full, spans = content_spans(render, messages)
    roles = ["template"] * len(full)
    if bare is not None:
        start, end = inserted(bare(messages, add_generation_prompt=True), full)
        roles[start:end] = ["tools"] * (end - start)
    for span in spans:
        role = "call" if span.message.role == "assistant" and is_call(span.message.content) else span.message.role
        roles[span.start: span.retrieved_end] = ["retrieved"] * (span.retrieved_end - span.start)
        roles[span.retrieved_end: span.end] = [role] * (span.end - span.retrieved_end)
    return roles


def build(tokens: list[Token], render: Render, prompt_messages: list[Message], prompt_tokens: int,
          cached_tokens: int, drafted: Collection[int] = (), forced: int = 0,
          bare: Render | None = None) -> list[PromptToken]:
    """Describe every token in the KV cache after a turn: `tokens` are the cache's, in order;
    the first `prompt_tokens` were the prompt, of which `cached_tokens` were reused; `drafted`
    holds the indexes of reply tokens (0: the reply's first) that were accepted drafts. The
    prompt's last `forced` tokens were the reply's start, given (a branch from a token): read
    as prompt, they are the reply's all the same. `bare`: as role_of_chars."""
    drafted = frozenset(drafted)
    reply_start = prompt_tokens - forced
    roles = role_of_chars(render, prompt_messages, bare)
    reply_role = "call" if bare is not None and is_call("".join(t.piece for t in tokens[reply_start:])) else "assistant"
    pos = 0
    if tokens and tokens[0].special and not render(prompt_messages).startswith(tokens[0].piece):
        pos = -len(tokens[0].piece)  # the tokenizer added a BOS the template text lacks
    view = []
    for i, token in enumerate(tokens):
        if i < cached_tokens:
            origin = "cached"
        elif i < prompt_tokens:
            origin = "prefilled"
        else:
            origin = "generated"
        if token.image:  # a cell of an image (chatapp.engine.images): the marker's text is its first
            role = "image"
        elif token.special:
            role = "template"
        elif i >= reply_start:
            role = reply_role
        else:
            role = roles[pos] if 0 <= pos < len(roles) else "template"
        view.append(PromptToken(token, role, origin, origin == "generated" and i - reply_start in drafted))
        pos += len(token.piece)
    return view


WRITTEN_ONCE = ("system", "tools")
"""The roles a conversation's cache holds once, whatever its length: the system prompt and the
tool schemas, at its start. A next turn writes none of them again."""


def written_once(view: list[PromptToken], start: int = 0) -> int:
    """The tokens of `view` from `start` on whose role is written once a conversation (WRITTEN_ONCE)."""
    return sum(1 for item in view[start:] if item.role in WRITTEN_ONCE)


def role_counts(view: list[PromptToken]) -> dict[str, int]:
    counts = dict.fromkeys(ROLES, 0)
    for item in view:
        counts[item.role] = counts.get(item.role, 0) + 1
    return counts
