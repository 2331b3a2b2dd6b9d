"""Attention you can watch: llama.cpp's own attention weights for the last turn's reply tokens.

How they are read. Decoding never runs with an evaluation callback: llama.cpp would call into
Python at every node of every graph (about half a millisecond a token for the default model),
and with flash attention on, as chatapp runs it, there is no soft-max tensor to read at all.
So after the turn, on request, the in-process backend replays the turn's tokens (exactly the
ids in the KV cache: the prompt, then the reply) through a second llama.cpp context on the same
loaded model, with flash attention off, an f16 KV cache of its own and `cb_eval` set. For each
batch that holds reply positions, llama.cpp hands over every layer's `kq_soft_max` tensor (the
weights after the soft-max, one row per query token and head, one column per KV cell), and
`SoftMaxCollector` keeps only the reply rows, reduced at once. The weights are llama.cpp's
real ones for those tokens, computed without flash attention; the reply itself was decoded
before, untouched.

Whether the replay is the computation it claims to explain can be checked: the replay asks for
logits at the kept reply rows only and keeps each row's argmax (`AttentionMap.replayed_next`), the
token it would have chosen next. For a greedy turn those are the reply's own next tokens, but for
near ties: decode ran with flash attention (and the chat's KV type), which rounds otherwise.

Memory stays bounded: per layer, the mean over heads of each reply row, and every head's row
for one chosen layer, as float16, at most `MEMORY_CAP` bytes (a longer reply keeps its first
rows and says so).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

MEMORY_CAP = 256 * 2**20
"""Bytes the kept rows may take (float16); beyond it, only the first reply rows are kept."""


@dataclass(frozen=True)
class AttentionUnavailable:
    """Why there are no weights to show; the view says this instead of drawing anything."""

    reason: str


@dataclass(frozen=True, eq=False)
class AttentionMap:
    """Attention rows of a turn's reply tokens, as llama.cpp computed them in the replay.

    Positions are KV cells: the replay fills a fresh cache in order, one sequence, so cell i
    holds position i, the i-th of `tokens`.
    """

    tokens: tuple[int, ...]
    """The ids replayed: the turn's KV cache, prompt then reply."""
    reply_start: int
    """Position of the first reply token."""
    rows: int
    """Reply rows kept, from reply_start on (fewer than the reply's tokens only under MEMORY_CAP)."""
    layers: tuple[int, ...]
    """Layers that computed a soft-max (all of them, for an attention-only model)."""
    n_heads: dict[int, int]
    """Query heads per layer, as llama.cpp's tensor had them."""
    mean: np.ndarray
    """float16 (n_layer, rows, len(tokens)): each reply row averaged over the layer's heads."""
    head_layer: int | None
    """The layer whose heads are kept one by one, or None."""
    heads: np.ndarray | None
    """float16 (n_heads[head_layer], rows, len(tokens)) for head_layer, or None."""
    replayed_next: np.ndarray | None
    """int32 (rows,): at each kept reply row, the argmax of the replay's logits there, the token the
    replay predicts for the next position (row r: position reply_start + r + 1); None when the
    replay read no logits."""
    kv_type: str
    """The replay's KV cache type (f16, whatever the chat's)."""
    chat_kv_type: str
    seconds: float
    """Wall time of the replay, callback included."""

    @property
    def reply_tokens(self) -> int:
        return len(self.tokens) - self.reply_start

    @property
    def positions(self) -> range:
        """Positions of the reply tokens whose rows were kept."""
        return range(self.reply_start, self.reply_start + self.rows)

    def weights(self, position: int, layer: int, head: int | None = None) -> np.ndarray:
        """float32 weights of the query at `position` over positions 0..position (the causal
        mask makes every later one zero): averaged over heads, or of one head of head_layer."""
        if position not in self.positions:
            raise ValueError(f"position {position} is not a kept reply row ({self.positions.start}-"
                             f"{self.positions.stop - 1})")
        if layer not in self.layers:
            raise ValueError(f"layer {layer} computed no attention here")
        row = position - self.reply_start
        if head is None:
            return self.mean[layer, row, : position + 1].astype(np.float32)
        if layer != self.head_layer or self.heads is None:
            raise ValueError(f"heads one by one were kept for layer {self.head_layer}, not {layer}")
        return self.heads[head, row, : position + 1].astype(np.float32)

    def next_token_matches(self) -> tuple[int, int] | None:
        """(agreeing, compared): of the kept reply rows whose next token is among `tokens` (the
        last reply token's successor was never cached), at how many replayed_next is that token.
        None without replayed_next."""
        if self.replayed_next is None:
            return None
        compared = min(self.rows, len(self.tokens) - 1 - self.reply_start)
        decoded = np.asarray(self.tokens[self.reply_start + 1: self.reply_start + 1 + compared])
        return int((self.replayed_next[:compared] == decoded).sum()), compared

    def how(self) -> str:
        """How these weights were obtained, in one sentence for the view, and on a line of its own
        how often the replay predicts the reply's next token."""
        kv = self.kv_type if self.kv_type == self.chat_kv_type else \
            f"{self.kv_type} (the chat's cache is {self.chat_kv_type})"
        text = (f"llama.cpp's soft-max weights (kq_soft_max), read through its eval callback while the turn's "
                f"{len(self.tokens):,} tokens were replayed in a separate context without flash attention, "
                f"KV cache {kv}, in {self.seconds:.1f} s; the reply was decoded before, with no callback.")
        matches = self.next_token_matches()
        if matches is not None and matches[1]:
            text += f"\nThe replay predicts the reply's next token at {matches[0]:,} of {matches[1]:,} rows."
        return text


class SoftMaxCollector:
    """Receives llama.cpp's soft-max rows batch by batch and keeps the reply rows, reduced.

    The runtime asks `rows_wanted(start, n)` for a batch of n tokens from position start (None:
    nothing wanted, the batch runs without a stop at any soft-max), then calls `take` per layer
    with the wanted rows as float32 (n_head, rows, n_kv). Columns past the replayed tokens
    (llama.cpp pads n_kv to 256 cells) are dropped. A replay that reads logits at the wanted rows
    hands their argmax to `take_next`.
    """

    def __init__(self, n_tokens: int, reply_start: int, rows: int, n_layer: int, head_layer: int | None) -> None:
        self.n_tokens, self.reply_start, self.rows = n_tokens, reply_start, rows
        self.head_layer = head_layer
        self.mean = np.zeros((n_layer, rows, n_tokens), dtype=np.float16)
        self.heads: np.ndarray | None = None
        self.n_heads: dict[int, int] = {}
        self.next = np.full(rows, -1, dtype=np.int32)
        """Each kept row's predicted next token (-1: not given)."""

    def rows_wanted(self, start: int, n: int) -> tuple[int, int] | None:
        """The batch's rows [first, end) that are kept reply rows, or None."""
        first, end = max(start, self.reply_start), min(start + n, self.reply_start + self.rows)
        return (first - start, end - start) if first < end else None

    def take(self, layer: int, position: int, weights: np.ndarray) -> None:
        """`weights` (n_head, r, n_kv): rows of the queries at position, position+1, ..."""
        if not 0 <= layer < self.mean.shape[0]:
            raise ValueError(f"llama.cpp named a soft-max for layer {layer} of {self.mean.shape[0]}")
        n_head, r, n_kv = weights.shape
        row = position - self.reply_start
        cols = min(n_kv, self.n_tokens)
        self.n_heads[layer] = n_head
        self.mean[layer, row:row + r, :cols] = weights[:, :, :cols].mean(axis=0)
        if layer == self.head_layer:
            if self.heads is None:
                self.heads = np.zeros((n_head, self.rows, self.n_tokens), dtype=np.float16)
            self.heads[:, row:row + r, :cols] = weights[:, :, :cols]

    def take_next(self, position: int, tokens: np.ndarray) -> None:
        """`tokens`: the argmax of the logits at position, position+1, ... (kept rows only)."""
        row = position - self.reply_start
        if row < 0 or row + len(tokens) > self.rows:
            raise ValueError(f"rows {position}-{position + len(tokens) - 1} are not kept reply rows")
        self.next[row:row + len(tokens)] = tokens

    def replayed_next(self) -> np.ndarray | None:
        """The predicted next tokens, when the replay gave one for every kept row."""
        return None if (self.next < 0).any() else self.next


Replay = Callable[[Sequence[int], SoftMaxCollector, Callable[[], bool]], bool]
"""`replay(tokens, collector, should_stop)`: run tokens through a capture context, feeding the
collector; False when should_stop cut it short (chatapp.engine.local.llama.LlamaRuntime.replay_soft_max)."""


def rows_within_cap(reply_tokens: int, n_tokens: int, n_layer: int, n_head: int, cap: int | None = None) -> int:
    """How many reply rows fit in `cap` bytes (MEMORY_CAP by default): per row, n_layer means and
    n_head single heads of n_tokens float16 columns. At least one."""
    per_row = (n_layer + n_head) * n_tokens * 2
    return max(1, min(reply_tokens, (MEMORY_CAP if cap is None else cap) // per_row))


def capture(replay: Replay, tokens: Sequence[int], reply_start: int, *, n_layer: int, n_head: int,
            head_layer: int | None, kv_type: str, chat_kv_type: str,
            stop: threading.Event | None = None) -> AttentionMap | AttentionUnavailable:
    """Replay `tokens` and keep the attention rows of positions reply_start.. (see the module)."""
    tokens = tuple(tokens)
    if reply_start >= len(tokens):
        return AttentionUnavailable("the last turn has no reply tokens to look at")
    if head_layer is not None and not 0 <= head_layer < n_layer:
        raise ValueError(f"layer {head_layer} is not one of the model's {n_layer}")
    rows = rows_within_cap(len(tokens) - reply_start, len(tokens), n_layer, n_head)
    collector = SoftMaxCollector(len(tokens), reply_start, rows, n_layer, head_layer)
    started = time.perf_counter()
    stop = stop or threading.Event()
    if not replay(tokens, collector, stop.is_set):
        return AttentionUnavailable("stopped before the replay finished")
    if not collector.n_heads:
        return AttentionUnavailable("this model computed no attention soft-max (recurrent layers have none)")
    return AttentionMap(tokens=tokens, reply_start=reply_start, rows=rows, layers=tuple(sorted(collector.n_heads)),
                        n_heads=dict(collector.n_heads), mean=collector.mean,
                        head_layer=head_layer if collector.heads is not None else None, heads=collector.heads,
                        replayed_next=collector.replayed_next(),
                        kv_type=kv_type, chat_kv_type=chat_kv_type, seconds=time.perf_counter() - started)
