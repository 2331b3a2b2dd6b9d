"""A token's nearest neighbours in the model's own input-embedding matrix, by cosine similarity.

token_embd.weight is dequantized once with the gguf package's dequantizer, each row scaled to
unit length, and cached as float16 in paths.cache_dir()/embeddings/, named by the model file's
sha256 (a copied or renamed file reuses it). Later loads memory-map that file.

Queries run on a float32 copy in memory (vocab × n_embd × 4 bytes: 113 MB for the default
model): numpy has no BLAS kernel for float16, and on the 2-core development machine a float16
matrix-vector product over the default model's 49,152 × 576 rows took about 80 ms against
about 2 ms in float32.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from gguf.constants import GGMLQuantizationType
from gguf.quants import dequantize

from chatapp import paths
from chatapp.engine.filecache import file_sha256
from chatapp.engine.models.gguf_header import GGUFHeader, TensorEntry, read_header, tensor_nbytes
from chatapp.engine.models.quant import model_info
from chatapp.engine.tokens import Token
from chatapp.errors import InputError, ModelError
from chatapp.private import make_private_dir, open_private, temp_path

CACHE_FORMAT = 1
"""Bumped when the cached matrix would mean something else (another normalisation, another tensor)."""
EMBEDDING_TENSOR = "token_embd.weight"
UNSCORED = -2.0
"""Where a row without a cosine ranks: below every cosine (-1 at least), above the query itself."""
BUILD_ROWS = 8192
"""Rows dequantized at a time, so building for a 262k vocabulary never holds it all in float32 twice."""


@dataclass(frozen=True)
class Neighbour:
    id: int
    piece: str
    score: float | None
    """Cosine similarity to the query token, from -1 to 1; None where the file's row for this
    token holds NaN or infinity, so that no score can be computed (JSON has no NaN)."""

    def to_json(self) -> dict:
        return {"id": self.id, "piece": self.piece, "score": None if self.score is None else round(self.score, 4)}


def cache_file(sha256: str) -> Path:
    return paths.cache_dir() / "embeddings" / f"{sha256}.v{CACHE_FORMAT}.f16.npy"


def embedding_tensor(header: GGUFHeader) -> TensorEntry:
    tensor = next((t for t in header.tensors if t.name == EMBEDDING_TENSOR), None)
    if tensor is None or len(tensor.shape) != 2:
        raise ModelError(f"the model has no 2-D {EMBEDDING_TENSOR}, so there are no embeddings to compare")
    return tensor


def unit_rows(path: Path, header: GGUFHeader) -> np.ndarray:
    """The embedding matrix, one unit-length float16 row per token, dequantized by gguf."""
    tensor = embedding_tensor(header)
    n_embd, n_rows = tensor.shape
    try:
        qtype = GGMLQuantizationType(tensor.ggml_type)
    except ValueError:
        raise ModelError(f"{EMBEDDING_TENSOR} has ggml type {tensor.ggml_type}, unknown to gguf") from None
    raw = np.memmap(path, dtype=np.uint8, mode="r", offset=header.data_offset + tensor.offset,
                    shape=(tensor_nbytes(tensor),)).reshape(n_rows, -1)
    out = np.empty((n_rows, n_embd), dtype=np.float16)
    for start in range(0, n_rows, BUILD_ROWS):
        try:
            rows = np.asarray(dequantize(raw[start:start + BUILD_ROWS], qtype), dtype=np.float32)
        except NotImplementedError as exc:
            raise ModelError(f"cannot dequantize {EMBEDDING_TENSOR}: {exc}") from None
        # An all-zero row (an unused token) stays zero: similar to nothing. A row with infinite
        # values (a damaged file) becomes NaN, quietly: numpy's warning would print on stderr.
        with np.errstate(invalid="ignore", over="ignore"):
            norms = np.linalg.norm(rows, axis=1, keepdims=True)
            out[start:start + len(rows)] = np.divide(rows, norms, out=np.zeros_like(rows), where=norms > 0)
    return out


def _save(matrix: np.ndarray, target: Path) -> None:
    """Write the cache file, 0600 in a 0700 folder from the start (the cache holds nothing secret,
    but every file chatapp writes is private). Raises OSError."""
    make_private_dir(target.parent)
    tmp = temp_path(target)
    try:
        with open_private(tmp) as out:
            np.save(out, matrix)
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def cached_unit_rows(path: Path) -> np.ndarray:
    """The unit-row matrix from the cache (memory-mapped), built and cached on first use."""
    path = Path(path).resolve()
    header = read_header(path)
    n_embd, n_rows = embedding_tensor(header).shape
    target = cache_file(file_sha256(path))
    try:
        paths.check_regular(target)  # a named pipe there would be waited on forever: built again instead
        cached = np.load(target, mmap_mode="r", allow_pickle=False)
        if cached.shape == (n_rows, n_embd) and cached.dtype == np.float16:
            return cached
    except (OSError, ValueError):  # missing, truncated or not an .npy: build it again
        pass
    matrix = unit_rows(path, header)
    try:
        _save(matrix, target)
    except OSError:  # a full disk, a read-only cache, a folder in the way: the answer stands, uncached
        pass
    return matrix


class EmbeddingIndex:
    """Cosine similarity between tokens of one model; safe to query from several threads."""

    def __init__(self, rows: np.ndarray, path: Path | None = None):
        self._rows = np.ascontiguousarray(rows, dtype=np.float32)
        self.path = path

    @classmethod
    def open(cls, path: Path) -> EmbeddingIndex:
        """The index for a GGUF file: its cached embeddings, limited to the tokens its tokenizer knows
        (some files pad the matrix). Raises ModelError, HeaderError (a ValueError) or OSError."""
        rows = cached_unit_rows(path)
        vocab = model_info(path).vocab_size
        return cls(rows[:vocab] if 0 < vocab < len(rows) else rows, Path(path).resolve())

    @property
    def n_vocab(self) -> int:
        return len(self._rows)

    def nearest_ids(self, token: int, k: int = 10) -> list[tuple[int, float | None]]:
        """The k tokens most similar to `token` (itself left out), best first, with their scores
        (None for a row without one). Raises ModelError when `token`'s own row is not finite."""
        if not 0 <= token < self.n_vocab:
            raise InputError(f"token id {token} is outside the vocabulary (0 to {self.n_vocab - 1})")
        if k < 1:
            raise InputError(f"k must be at least 1, got {k}")
        query = self._rows[token]
        if not np.isfinite(query).all():
            raise ModelError(f"the {EMBEDDING_TENSOR} row of token {token} holds NaN or infinite values, "
                             "so it is similar to nothing")
        with np.errstate(invalid="ignore", over="ignore"):
            scores = self._rows @ query
        # A row of NaN or infinity (a damaged or hostile file) has no cosine: it ranks last and
        # its score is None, never NaN, which JSON cannot hold.
        finite = np.isfinite(scores)
        ranked = np.where(finite, scores, UNSCORED)
        ranked[token] = -np.inf  # below even those: the token itself is never its own neighbour
        finite[token] = False
        k = min(k, self.n_vocab - 1)
        if k <= 0:
            return []
        top = np.argpartition(-ranked, k - 1)[:k]
        order = top[np.argsort(-ranked[top], kind="stable")]
        return [(int(i), float(scores[i]) if finite[i] else None) for i in order]

    def nearest(self, describe: Callable[[list[int]], list[Token]], token: int, k: int = 10) -> list[Neighbour]:
        """nearest_ids with each token's text, as the model's own tokenizer spells it
        (`describe` is Engine.describe: ids to pieces)."""
        found = self.nearest_ids(token, k)
        pieces = [describe([i])[0].piece for i, _ in found]
        return [Neighbour(i, piece, score) for (i, score), piece in zip(found, pieces)]
