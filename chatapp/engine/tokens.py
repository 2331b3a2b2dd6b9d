"""How text is cut into tokens, with pieces that join back into the exact input.

A token can hold part of a UTF-8 character (emoji and CJK are often split). Each token's
display piece is the text of the characters it completes, so no piece shows U+FFFD for a
split character, and joining the pieces gives back the input.
"""

from __future__ import annotations

import codecs
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """How many leading ids `a` and `b` share: the part of a cache a new prompt can reuse."""
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


class Vocabulary(Protocol):
    def token_bytes(self, token: int) -> bytes: ...
    def is_special(self, token: int) -> bool: ...


@dataclass(frozen=True)
class Token:
    id: int
    piece: str
    special: bool
    raw: bytes
    image: bool = False
    """One of an image's cells (chatapp.engine.images): its id is a pseudo id, no vocabulary entry."""

    def to_json(self) -> dict:
        return {"id": self.id, "piece": self.piece, "special": self.special, **({"image": True} if self.image else {})}


class Utf8Stream:
    """Turns a stream of token bytes into text, holding back split characters."""

    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def feed(self, data: bytes) -> str:
        return self._decoder.decode(data)

    def flush(self) -> str:
        return self._decoder.decode(b"", final=True)


def describe(vocab: Vocabulary, ids: list[int]) -> list[Token]:
    stream = Utf8Stream()
    tokens = [Token(i, stream.feed(vocab.token_bytes(i)), vocab.is_special(i), vocab.token_bytes(i)) for i in ids]
    tail = stream.flush()
    if tail and tokens:
        last = tokens[-1]
        tokens[-1] = Token(last.id, last.piece + tail, last.special, last.raw)
    return tokens


def tokenize_text(runtime, text: str) -> list[Token]:
    """Plain text as the model's tokenizer cuts it: no BOS, special-token text kept literal."""
    tokens = describe(runtime, runtime.tokenize(text, special=False, add_bos=False))
    # SentencePiece vocabularies prepend a space to the first word; the user never typed it.
    if tokens and "".join(t.piece for t in tokens) == " " + text and tokens[0].piece.startswith(" "):
        first = tokens[0]
        tokens[0] = Token(first.id, first.piece[1:], first.special, first.raw)
    return tokens


def joined(tokens: list[Token]) -> str:
    return "".join(t.piece for t in tokens)
