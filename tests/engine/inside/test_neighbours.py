"""Nearest tokens in the real default model's input embeddings: meaning, the cache, bad input."""

from __future__ import annotations

import os
import stat

import numpy as np
import pytest
from gguf import GGUFReader
from gguf.quants import dequantize

from chatapp.engine.filecache import file_sha256
from chatapp.engine.inside.neighbours import EmbeddingIndex, cache_file, cached_unit_rows
from chatapp.engine.tokens import describe, tokenize_text
from chatapp.errors import InputError, ModelError

WEEKDAYS = {"Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"}


@pytest.fixture(scope="module")
def index(default_model_path, tmp_path_factory):
    # Module-wide, so the matrix is built once here; the tests of the cache build their own.
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("cache")))
        return EmbeddingIndex.open(default_model_path)


def only_token(runtime, text: str) -> int:
    tokens = tokenize_text(runtime, text)
    assert len(tokens) == 1, tokens
    return tokens[0].id


@pytest.mark.parametrize("day", [" Monday", "Friday"])
def test_a_weekdays_neighbours_are_weekdays(index, runtime, day):
    found = index.nearest(lambda ids: describe(runtime, ids), only_token(runtime, day), k=5)
    days = [n.piece.strip() for n in found if n.piece.strip() in WEEKDAYS - {day.strip()}]
    assert len(days) >= 3, found
    assert all(-1.0 <= n.score <= 1.0 for n in found)
    assert [n.score for n in found] == sorted((n.score for n in found), reverse=True)


@pytest.mark.parametrize("digit", ["3", "7"])
def test_a_digits_neighbours_are_digits(index, runtime, digit):
    found = index.nearest(lambda ids: describe(runtime, ids), only_token(runtime, digit), k=5)
    assert sum(n.piece.isdigit() and len(n.piece) == 1 for n in found) >= 4, found
    assert digit not in [n.piece for n in found]  # the token itself is left out


def test_an_unrelated_word_is_not_a_neighbour(index, runtime):
    found = index.nearest(lambda ids: describe(runtime, ids), only_token(runtime, " Monday"), k=20)
    assert not {" banana", " oxygen", " guitar"} & {n.piece for n in found}  # each one token


def test_scores_are_cosines_of_the_dequantized_rows(index, default_model_path):
    """Two rows read independently, with gguf's own reader, give the score the index reports."""
    tensor = next(t for t in GGUFReader(default_model_path).tensors if t.name == "token_embd.weight")
    a, b = 12397, 14801  # " Monday", " Tuesday"
    rows = dequantize(np.asarray(tensor.data[[a, b]]), tensor.tensor_type)
    expected = float(rows[0] @ rows[1] / np.linalg.norm(rows[0]) / np.linalg.norm(rows[1]))
    score = dict(index.nearest_ids(a, k=50))[b]
    assert score == pytest.approx(expected, abs=2e-3)  # float16 storage


def test_the_cache_is_keyed_by_sha256_and_memory_mapped(default_model_path):
    target = cache_file(file_sha256(default_model_path))
    assert not target.exists()
    built = cached_unit_rows(default_model_path)
    assert target.is_file() and built.dtype == np.float16 and built.shape == (49152, 576)
    loaded = cached_unit_rows(default_model_path)
    assert isinstance(loaded, np.memmap) and np.array_equal(loaded[:100], built[:100])


def test_a_damaged_cache_is_rebuilt(default_model_path):
    target = cache_file(file_sha256(default_model_path))
    first = cached_unit_rows(default_model_path)
    target.write_bytes(target.read_bytes()[:1000])
    again = cached_unit_rows(default_model_path)
    assert np.array_equal(again[-5:], first[-5:]) and target.stat().st_size > 1000


def test_the_cache_is_private_whatever_the_umask(default_model_path):
    old = os.umask(0)
    try:
        cached_unit_rows(default_model_path)
    finally:
        os.umask(old)
    target = cache_file(file_sha256(default_model_path))
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    assert stat.S_IMODE(target.parent.stat().st_mode) == 0o700


def test_a_cache_that_cannot_be_written_still_answers(default_model_path):
    """A folder where the cache file goes (or a full disk): the matrix is built, just not kept."""
    target = cache_file(file_sha256(default_model_path))
    target.mkdir(parents=True)
    rows = cached_unit_rows(default_model_path)
    assert rows.shape == (49152, 576) and target.is_dir()
    assert not [p for p in target.parent.iterdir() if p.name.endswith(".tmp")]


def test_bad_queries(index):
    with pytest.raises(InputError, match="outside the vocabulary"):
        index.nearest_ids(49152)
    with pytest.raises(InputError, match="k must be at least 1"):
        index.nearest_ids(5, k=0)
    assert len(index.nearest_ids(5, k=100_000)) == index.n_vocab - 1


def test_a_file_without_embeddings(tmp_path):
    """SYNTHETIC: a GGUF with one tensor and no token_embd."""
    from gguf import GGUFWriter

    path = tmp_path / "no-embd.gguf"
    writer = GGUFWriter(path, "llama")
    writer.add_tensor("output.weight", np.zeros((4, 32), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    with pytest.raises(ModelError, match="no 2-D token_embd.weight"):
        EmbeddingIndex.open(path)


def test_rows_without_a_cosine_score_none_and_json_stays_json(index):
    """The real matrix with two rows made NaN and infinite, as a damaged or hostile file gives:
    they rank last with score None, never NaN (which json.dumps(allow_nan=False) refuses)."""
    import json

    rows = np.array(index._rows[:200], dtype=np.float32)
    rows[7] = np.nan
    rows[8, :3] = np.inf
    damaged = EmbeddingIndex(rows)
    found = damaged.nearest_ids(0, k=199)
    assert [score for i, score in found if i in (7, 8)] == [None, None]
    assert all(score is not None for i, score in found if i not in (7, 8))
    assert {i for i, _ in found[-2:]} == {7, 8}
    json.dumps([{"id": i, "score": score} for i, score in found], allow_nan=False)
    with pytest.raises(ModelError, match="row of token 8 holds NaN or infinite values"):
        damaged.nearest_ids(8)
