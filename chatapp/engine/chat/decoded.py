"""Replies in the next prompt as their turns decoded them, token for token.

The next prompt is the conversation rendered and tokenized again, and a reply's text does not
always tokenize into the tokens the model wrote it with: under a tool call's grammar the default
model wrote `{`, ` `, `"` where the text tokenizes as `{`, ` "`. The cache and the new prompt then
part at that token, and everything after it (the rest of the call, the result, the template's
glue) is prefilled again: 44 tokens a step of a chained tool loop instead of 13
(benchmarks/tools.py). llama-server's own chat endpoint re-tokenizes the same way and loses the
same cells.

So a reply's decoded ids are kept (only where the cache shows them to spell its text exactly;
never for a reply holding bytes that were not UTF-8, whose text says U+FFFD where the tokens held
other bytes, and whose tokens llama-server gives back already replaced), and `splice` puts them
back where the prompt's tokens spell that text between token boundaries. The text the model
reads is the same byte for byte; only its cut into tokens is the one the cache holds. Only the
replies whose decoded ids differ from their text's own tokens are kept, so a conversation without
one pays nothing in `splice` (every figure's prompt goes through it); they also go in the turn's
record ("reply_ids_as_decoded"), so a saved session resumed in a new process puts them back
(`restore`) and keeps the same ones as the process that wrote it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from chatapp.engine.events import Message
from chatapp.engine.tokens import Token


class Tokenizer(Protocol):
    def describe(self, ids: Sequence[int]) -> list[Token]: ...
    def tokenize(self, text: str) -> list[Token]: ...


class DecodedReplies:
    """The decoded ids of this conversation's replies that differ from their text's own tokens,
    by message id."""

    def __init__(self, backend: Tokenizer) -> None:
        self._backend = backend
        self._ids: dict[str, tuple[int, ...]] = {}

    def remember(self, message_id: str, content: str, generated: Sequence[int]) -> list[int]:
        """Keep `generated` (the cache's ids after the turn's prompt) for reply `message_id` when
        they spell its `content` exactly and are not how the content tokenizes on its own.
        Returns what was kept (for the turn's record, so that a resumed session puts them back:
        `restore`), else []."""
        if not content or "\ufffd" in content:  # bytes that were not UTF-8: the text no longer spells them
            return []
        tokens = self._backend.describe(list(generated))
        ids = [t.id for t in tokens]
        if b"".join(t.raw for t in tokens) != content.encode("utf-8") or \
                ids == [t.id for t in self._backend.tokenize(content)]:
            return []
        self._ids[message_id] = tuple(ids)
        return ids

    def restore(self, replies: dict[str, tuple[str, list[int]]]) -> None:
        """Replies' decoded ids from a saved session's turn records ("reply_ids_as_decoded"), each
        with its content: kept only where they still spell it (a record edited by hand does not)."""
        for message_id, (content, ids) in replies.items():
            if ids and all(isinstance(i, int) for i in ids):
                self.remember(message_id, content, ids)

    def forget(self) -> None:
        self._ids.clear()

    def splice(self, ids: list[int], messages: Sequence[Message]) -> list[int]:
        """`ids` (a prompt's, for `messages`) with each kept reply's decoded ids in place of the
        tokens that spell its content, where those start and end on token boundaries. Each
        message's content is looked for after the one before it (as prompt_view.content_spans
        finds them), so a reply's text is not taken for an earlier message that holds the same."""
        if not any(m.id in self._ids for m in messages):
            return ids
        tokens = self._backend.describe(ids)
        starts, offset = {}, 0
        for index, token in enumerate(tokens):
            starts[offset] = index
            offset += len(token.raw)
        starts[offset] = len(tokens)
        blob = b"".join(t.raw for t in tokens)
        out, done, search = [], 0, 0
        for message in messages:
            content = message.as_template_input()["content"].encode("utf-8")
            at = blob.find(content, search) if content else -1
            if at < 0:
                continue  # the template changed it (a tool list added to the system message, say)
            search = at + len(content)
            decoded = self._ids.get(message.id) if message.role == "assistant" else None
            first, end = starts.get(at), starts.get(search)
            if decoded is None or first is None or end is None or first < done:
                continue  # not kept, or not cut at its edges here: the prompt's own tokens stay
            out += ids[done:first] + list(decoded)
            done = end
        return out + ids[done:]
