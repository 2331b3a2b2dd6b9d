"""A llama-server's tokenizer seen through /tokenize: ids, the bytes of each piece, and which
tokens are special, learned as they come and kept per id.

/tokenize with `with_pieces` gives each token's piece as a string, or as a list of byte values
when the piece is not whole UTF-8 (part of a character), so the bytes are exact and
`chatapp.engine.tokens` turns them into display pieces that join back into the text, as it
does for the in-process backend.

The server does not report token attributes. A token is taken as special (a control token)
when plain text cannot produce it: every id a plain-text tokenization (parse_special false)
yields is ordinary; any other id is special when its piece, tokenized again as plain text,
does not give back that one id. llama.cpp skips control tokens when it does not parse
specials, so this marks the same tokens the in-process backend marks by attribute.
"""

from __future__ import annotations

from collections.abc import Iterable

from chatapp.engine.server import answers
from chatapp.engine.server.http import ServerClient
from chatapp.errors import ServerError


class ServerVocabulary:
    def __init__(self, client: ServerClient) -> None:
        self._client = client
        self._bytes: dict[int, bytes] = {}
        self._special: dict[int, bool] = {}

    # --- what the tokenizer says -------------------------------------------------------
    def tokenize(self, text: str, *, special: bool, add_bos: bool = False) -> list[int]:
        """`special` parses special-token text (<|im_start|>) into their ids; `add_bos` lets
        the server add BOS (and whatever else the model asks for)."""
        data = self._client.post("/tokenize", {"content": text, "add_special": add_bos, "parse_special": special,
                                               "with_pieces": True}, answers.Pieces)
        ids = []
        for item in data.tokens:
            self._bytes.setdefault(item.id, item.data())
            if not special:
                self._special[item.id] = False
            ids.append(item.id)
        return ids

    def learn(self, token: int, piece: bytes) -> None:
        """A piece seen elsewhere (a streamed reply's text)."""
        self._bytes.setdefault(token, piece)

    # --- the Vocabulary protocol of chatapp.engine.tokens ----------------------------------
    def token_bytes(self, token: int) -> bytes:
        piece = self._bytes.get(token)
        if piece is None:
            # Never seen in a tokenization: the server's text for it (exact unless it is part
            # of a character, which /detokenize can only show as U+FFFD).
            try:
                text = self._client.post("/detokenize", {"tokens": [token]}, answers.Detokenized).content
            except ServerError:
                return "\ufffd".encode()  # the server went away; not kept, so it is asked again later
            piece = self._bytes.setdefault(token, text.encode("utf-8"))
        return piece

    def is_special(self, token: int) -> bool:
        if token not in self._special:
            self.classify([token])
        return self._special.get(token, False)

    def classify(self, ids: Iterable[int]) -> None:
        """Settle which of these ids are special, with as few requests as it takes: one plain
        tokenization of all their text at once clears the ordinary ones, then each id left is
        tried alone."""
        unknown = [t for t in dict.fromkeys(ids) if t not in self._special]
        if not unknown:
            return
        try:
            self.tokenize(b"".join(self.token_bytes(t) for t in unknown).decode("utf-8", "replace"), special=False)
            for token in unknown:
                if token in self._special:
                    continue
                try:
                    text = self.token_bytes(token).decode("utf-8")
                except UnicodeDecodeError:  # part of a character: a byte token, never special
                    self._special[token] = False
                    continue
                self._special[token] = self._plain_ids(text) != [token]
        except ServerError:
            pass  # the server went away: what is not settled shows as ordinary text, and is asked again later

    def _plain_ids(self, text: str) -> list[int]:
        data = self._client.post("/tokenize", {"content": text, "add_special": False, "parse_special": False},
                                 answers.Ids)
        return list(data.tokens)
