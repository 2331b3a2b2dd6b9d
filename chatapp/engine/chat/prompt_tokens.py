"""The templated prompt as token ids: the template's markers are control tokens, message text
never is.

A backend's `tokenize_prompt` parses special-token text anywhere in the prompt (llama.cpp's
parse_special, for the in-process backend and for llama-server's /tokenize alike), which the
template's own markers need. But text inside a message (a user's, or an attachment's) that
spells a special token, such as `<|im_end|>`, would then become that control token too: a
pasted chat log could close the user's turn and open an assistant's.

llama.cpp itself cuts the text at every special token it finds and tokenizes each run between
them as plain text. `prompt_ids` keeps that, and only changes what a message's content holds:
- the prompt is tokenized as before, and each special token located in the text;
- if none lies inside a message's content (the usual case), those ids are the answer, exactly
  as before;
- otherwise the specials inside content are not cuts: each run of text between the specials
  that remain (the template's) is tokenized again as plain text, and every other run keeps its
  ids. So the content reads as the characters it holds, and the rest is unchanged.

Shared by every backend: it asks only `tokenize_prompt`, `describe` and `tokenize`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from chatapp.engine.events import Message
from chatapp.engine.chat.prompt_view import Render, content_spans
from chatapp.engine.tokens import Token


class PromptTokenizer(Protocol):
    def tokenize_prompt(self, text: str, images: Sequence[str] = ()) -> list[int]: ...
    def describe(self, ids: Sequence[int]) -> list[Token]: ...
    def tokenize(self, text: str) -> list[Token]: ...


def prompt_ids(backend: PromptTokenizer, render: Render, messages: Sequence[Message], *,
               add_generation_prompt: bool = True) -> list[int]:
    """The ids of the templated prompt for `messages` (generation prompt added unless told),
    with every message's content read as plain text."""
    messages = list(messages)
    text = render(messages, add_generation_prompt=add_generation_prompt)
    images = [sha for m in messages for sha in m.images]
    ids = backend.tokenize_prompt(text, images) if images else backend.tokenize_prompt(text)
    tokens = backend.describe(ids)
    specials = {t.piece for t in tokens if t.special and t.piece}
    contents = [m.as_template_input()["content"] for m in messages]
    if not any(piece in content for piece in specials for content in contents):
        return ids  # no message spells a special token: nothing to change
    _, spans = content_spans(render, messages, add_generation_prompt=add_generation_prompt)
    cuts = _template_specials(text, tokens, [(s.start, s.end) for s in spans])
    out: list[int] = []
    first, text_from = 0, 0
    for index, start, end in [*cuts, (len(tokens), len(text), len(text))]:
        run = tokens[first:index]
        if any(t.special for t in run):  # a special spelled inside a message: read its run as text
            out.extend(t.id for t in backend.tokenize(text[text_from:start]))
        else:
            out.extend(ids[first:index])
        if index < len(tokens):
            out.append(ids[index])
        first, text_from = index + 1, end
    return out


def _template_specials(text: str, tokens: list[Token], spans: list[tuple[int, int]]) -> list[tuple[int, int, int]]:
    """(token index, start, end) in `text` of each special token that is not inside a message's
    content: the cuts between runs. A BOS the tokenizer added (its text is not at the start)
    is a cut of no width at 0."""
    cuts, pos = [], 0
    for i, token in enumerate(tokens):
        if not token.special:
            continue
        if i == 0 and not text.startswith(token.piece):
            cuts.append((0, 0, 0))
            continue
        at = text.find(token.piece, pos)
        if at < 0:  # a special without text of its own: leave it where it is
            cuts.append((i, pos, pos))
            continue
        pos = at + len(token.piece)
        if not any(start <= at and pos <= end for start, end in spans):
            cuts.append((i, at, pos))
    return cuts
