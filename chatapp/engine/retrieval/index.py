"""A BM25 index over chunks (bm25s), and the chunks that best match a question.

Each chunk is indexed with its file name and section heading in front of its text, so a
question that names a file or a section ("how do I install typer?") finds it. bm25s's own
tokenizer lower-cases words and drops English stopwords, with two settings of ours, each
measured on the retrieval test set (tests/engine/retrieval/test_quality.py, 17 questions):

- words are runs of letters and digits, so `sensors_battery` is the words "sensors" and
  "battery" (bm25s's default keeps it one word): recall@3 went from 12/17 to 15/17;
- plurals are folded by Harman's S-stemmer ("extras" -> "extra", "requires" -> "require"):
  16/17. A real stemmer would be PyStemmer, which is not a dependency; this one is three
  suffix rules, tested against the examples of Harman (1991), "How effective is suffixing?".
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from chatapp.engine.retrieval.chunking import Chunk

STOPWORDS = "en"
WORDS = r"(?u)[^\W_]{2,}"


def fold_plurals(words: list[str]) -> list[str]:
    """Harman's S-stemmer, called by bm25s with a list of words."""
    return [_singular(word) for word in words]


def _singular(word: str) -> str:
    if word.endswith("ies") and not word.endswith(("eies", "aies")):
        return word[:-3] + "y"
    if word.endswith("es") and not word.endswith(("aes", "ees", "oes")):
        return word[:-1]
    if word.endswith("s") and not word.endswith(("us", "ss")):
        return word[:-1]
    return word


@dataclass(frozen=True)
class Scored:
    chunk: Chunk
    score: float


class ChunkIndex:
    """Built once per set of chunks; `search` is safe to call from any one thread at a time."""

    def __init__(self, chunks: Sequence[Chunk]):
        import bm25s  # loading numpy and bm25s is paid for only when something is attached

        self.chunks = tuple(chunks)
        self._bm25s = bm25s
        self._bm25 = bm25s.BM25()
        if self.chunks:
            corpus = self._words([_indexed_text(c) for c in self.chunks])
            self._bm25.index(corpus, show_progress=False)

    def search(self, question: str, limit: int = 10) -> list[Scored]:
        """Up to `limit` chunks that share words with the question, best first.

        Chunks scoring 0 (no word in common) are never returned; ties keep document order.
        """
        if not self.chunks:
            return []
        known = [w for w in self._words([question])[0] if w in self._bm25.vocab_dict]
        if not known:
            return []
        scores = self._bm25.get_scores(known)
        ranked = sorted(range(len(self.chunks)), key=lambda i: (-scores[i], i))
        return [Scored(self.chunks[i], float(scores[i])) for i in ranked[:limit] if scores[i] > 0]

    def _words(self, texts: list[str]) -> list[list[str]]:
        return self._bm25s.tokenize(texts, token_pattern=WORDS, stopwords=STOPWORDS, stemmer=fold_plurals,
                                    return_ids=False, show_progress=False)


def _indexed_text(chunk: Chunk) -> str:
    return f"{chunk.file}\n{chunk.section}\n{chunk.text}"
