"""Filling a llama_batch of sequence 0: which rows get logits."""

from __future__ import annotations

from collections.abc import Sequence

from chatapp.errors import ModelError


def fill_batch(batch, tokens: Sequence[int], start: int, outputs: str | int = "all") -> None:
    """Put `tokens` in a llama_batch of sequence 0 at positions start, start+1, ...; logits for
    every row ("all"), the last one ("last"), or every row from index `outputs` on."""
    n = len(tokens)
    first = first_output(outputs, n)
    for i, token in enumerate(tokens):
        batch.token[i] = token
        batch.pos[i] = start + i
        batch.n_seq_id[i] = 1
        batch.seq_id[i][0] = 0
        batch.logits[i] = i >= first
    batch.n_tokens = n


def first_output(outputs: str | int, n: int) -> int:
    """The first of `n` rows that `outputs` ("all", "last" or an index) asks logits for."""
    first = 0 if outputs == "all" else n - 1 if outputs == "last" else int(outputs)
    if not 0 <= first < n:
        raise ModelError(f"logits from row {first} of a {n}-token batch")
    return first

