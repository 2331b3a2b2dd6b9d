"""How surprised the model is by each token of a text, and the text's perplexity.

A token's surprise is -ln p, in nats, where p is the probability the model gave that token
from the tokens before it. The text is cut as llama.cpp's `llama-perplexity` cuts it: windows
of `ctx` tokens, each evaluated from an empty cache (its first token replaced by BOS when the
model adds one), logits at every position. Row r of a window predicts the window's token r+1,
and its last row the next window's first token, so every token but the text's first gets a
surprise, each seen with the context of its own window only.

Two perplexities come out. `ppl` is exp of the mean surprise of every token that has one: the
text's own. `llama_ppl` is llama-perplexity's estimate, computed the same way it does: only the
second half of each full window counts (positions ctx/2 to ctx-2 predict their next token, so
each scored token has at least ctx/2 tokens of context), and the tail past the last full window
is left out; None when the text is shorter than two windows, which llama-perplexity refuses.

`only_scored` computes just what llama-perplexity computes: the logits of the second halves of
the full windows, and the surprise of the tokens its estimate counts (the others stay NaN), so
`ppl` is its estimate and the two run like for like. Every token's surprise costs the output head
at every position, which for the default model is a fifth of a token's compute: about 10% more in
all (benchmarks/next_token.py measures both).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from chatapp.errors import InputError

MIN_CTX = 16
SHADES = (1.0, 2.5, 5.0)
"""Surprise bounds (nats) of the strip's shades: below 1 (p above 37%), below 2.5 (8%), below 5
(0.7%), and above; the UI maps each to a theme colour."""
SHADE_LABELS = ("expected (p > 37%)", "plausible (p > 8%)", "surprising (p > 0.7%)", "very surprising")
KLD_SHADES = (0.01, 0.1, 1.0)
"""KL divergence bounds (nats) of the comparison strip's shades."""
KLD_LABELS = ("the same (KLD < 0.01)", "close (< 0.1)", "apart (< 1)", "far apart (KLD >= 1)")


def shade(value: float, bounds: tuple[float, ...] = SHADES) -> int:
    """Index into SHADE_LABELS (or KLD_LABELS, with KLD_SHADES) of a surprise or a KL divergence
    (NaN: the first shade, nothing to show)."""
    if not value > 0:
        return 0
    return next((i for i, bound in enumerate(bounds) if value < bound), len(bounds))


def nll_rows(logits: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """-log softmax(logits[i])[targets[i]] for each row, in float64 sums as llama-perplexity's."""
    rows = logits.astype(np.float32, copy=False)
    top = rows.max(axis=1, keepdims=True)
    chosen = rows[np.arange(len(targets)), targets]
    shifted = np.subtract(rows, top)  # one work array, exponentiated in place: 100 MB a 512-token window
    sums = np.exp(shifted, out=shifted).sum(axis=1, dtype=np.float64)
    return (np.log(sums) + top[:, 0] - chosen).astype(np.float64)


@dataclass(frozen=True, eq=False)
class Surprise:
    """A text's tokens, each one's surprise, and the perplexities (see the module)."""

    ids: tuple[int, ...]
    pieces: tuple[str, ...]
    surprise: np.ndarray
    """float64 (len(ids),), nats; NaN for the first token, which nothing predicts."""
    ctx: int
    llama_ppl: float | None
    llama_scored: int
    """Tokens llama-perplexity's estimate counts (n_chunk x (ctx - ctx/2 - 1))."""
    seconds: float

    @property
    def scored(self) -> int:
        return int(np.isfinite(self.surprise).sum())

    @property
    def ppl(self) -> float:
        mean = float(np.nanmean(self.surprise)) if self.scored else 0.0
        return math.exp(mean) if mean < 709 else math.inf

    @property
    def tokens_per_second(self) -> float:
        return len(self.ids) / self.seconds if self.seconds > 0 else 0.0

    @property
    def only_scored(self) -> bool:
        """Only the tokens llama-perplexity scores have a surprise (see the module)."""
        return self.llama_ppl is not None and self.scored == self.llama_scored

    def describe(self) -> str:
        """One line: what the figures are."""
        if self.only_scored:
            return (f"{len(self.ids):,} tokens, perplexity {self.ppl:.4f} over the {self.scored:,} that "
                    f"llama-perplexity scores (second halves of full windows of {self.ctx}), in {self.seconds:.1f} s")
        line = (f"{len(self.ids):,} tokens, perplexity {self.ppl:.3f} over the {self.scored:,} that something "
                f"predicts (windows of {self.ctx}), in {self.seconds:.1f} s")
        if self.llama_ppl is not None:
            line += f"; llama-perplexity's estimate (second halves of full windows) {self.llama_ppl:.4f}"
        return line

    def to_json(self) -> dict:
        return {"ctx": self.ctx, "ppl": _round(self.ppl), "scored": self.scored,
                "llama_perplexity": None if self.llama_ppl is None else
                {"ppl": _round(self.llama_ppl), "scored": self.llama_scored},
                "seconds": round(self.seconds, 3),
                "tokens": [{"id": i, "piece": piece, "surprise": None if not math.isfinite(s) else _round(s)}
                           for i, piece, s in zip(self.ids, self.pieces, self.surprise.tolist())]}


DecodeWindow = Callable[[Sequence[int], int], np.ndarray]
"""`decode(window, first_row)`: the window's tokens from an empty cache, logits at every position
from first_row on (float32, (len(window) - first_row, n_vocab))."""


def windows(n_tokens: int, ctx: int) -> list[tuple[int, int]]:
    """[start, end) of each window: full ones of ctx tokens, then the tail."""
    return [(start, min(start + ctx, n_tokens)) for start in range(0, n_tokens, ctx)]


def llama_positions(n_tokens: int, ctx: int) -> np.ndarray | None:
    """The tokens llama-perplexity scores (its perplexity and its --kl-divergence alike): the
    second halves of the full windows. None under two of them, which it refuses."""
    full, first = n_tokens // ctx, ctx // 2
    if full < 2:
        return None
    return np.concatenate([np.arange(k * ctx + first + 1, (k + 1) * ctx) for k in range(full)])


def llama_estimate(surprise: np.ndarray, ctx: int) -> tuple[float | None, int]:
    """llama-perplexity's estimate from every token's surprise, and how many tokens it counts."""
    positions = llama_positions(len(surprise), ctx)
    if positions is None:
        return None, 0
    return math.exp(float(surprise[positions].mean())), len(positions)


def scored_windows(n_tokens: int, ctx: int, only_scored: bool) -> list[tuple[int, int, int]]:
    """(start, end, first_row) of each window to evaluate: every window from its first row, or
    (only_scored) the full ones from their middle row, which predicts the first scored token."""
    if not only_scored:
        return [(start, end, 0) for start, end in windows(n_tokens, ctx)]
    if n_tokens // ctx < 2:
        raise InputError(f"llama-perplexity's estimate needs two full windows of {ctx} tokens; the text has "
                         f"{n_tokens}")
    return [(start, start + ctx, ctx // 2) for start in range(0, n_tokens // ctx * ctx, ctx)]


def window_targets(ids: Sequence[int], start: int, end: int, first_row: int, only_scored: bool) -> np.ndarray:
    """The tokens that a window's rows from first_row on predict: up to the next window's first
    (which its last row predicts), or (only_scored) up to the window's own last, as llama-perplexity
    counts them. They start at ids[start + first_row + 1]."""
    return np.asarray(ids[start + first_row + 1:end if only_scored else end + 1], dtype=np.int64)


def check_ctx(ctx: int, trained: int) -> None:
    """`ctx` as a window size for a model trained on `trained` tokens, or one line saying why
    not: checked before a window's context is made (a negative size crashed llama.cpp), and
    above the training context the figures would measure positions the model never saw."""
    if ctx < MIN_CTX:
        raise InputError(f"--ctx must be at least {MIN_CTX}, got {ctx}")
    if trained > 0 and ctx > trained:
        raise InputError(f"--ctx {ctx:,} is above the model's training context of {trained:,} tokens")


def measure(ids: Sequence[int], pieces: Sequence[str], ctx: int, decode: DecodeWindow, *, bos: int | None,
            should_stop: Callable[[], bool] = lambda: False, only_scored: bool = False) -> Surprise | None:
    """Surprise of every token of `ids`, or (only_scored) of those llama-perplexity scores (see
    the module); `bos`: the id each window starts with, or None when the model adds none. None
    when should_stop said so between windows."""
    ids = list(ids)
    check_ctx(ctx, 0)
    if len(ids) < 2:
        raise InputError("the text is fewer than two tokens: nothing predicts anything")
    started = time.perf_counter()
    surprise = np.full(len(ids), np.nan)
    for start, end, first_row in scored_windows(len(ids), ctx, only_scored):
        if should_stop():
            return None
        window = ids[start:end]
        if bos is not None:
            window[0] = bos
        logits = decode(window, first_row)
        targets = window_targets(ids, start, end, first_row, only_scored)
        at = start + first_row + 1
        surprise[at:at + len(targets)] = nll_rows(logits[:len(targets)], targets)
    llama_ppl, llama_scored = llama_estimate(surprise, ctx)
    return Surprise(tuple(ids), tuple(pieces), surprise, ctx, llama_ppl, llama_scored, time.perf_counter() - started)


@dataclass(frozen=True)
class QuantFile:
    """One side of a comparison: the model as the user named it, its file's size, and its decode
    speed here (one token a step, greedy, on the same threads as the other side)."""

    name: str
    size_bytes: int
    decode_tps: float

    def to_json(self) -> dict:
        return {"name": self.name, "size_bytes": self.size_bytes, "decode_tok_s": round(self.decode_tps, 1)}


@dataclass(frozen=True, eq=False)
class QuantCost:
    """What a second quant of the same model costs on a text, token by token: both models run
    over the same windows (no logits file), and at each predicted token the KL divergence of the
    second's distribution from the first's, whether their top choices are the same, and the
    second's probability of the text's token minus the first's."""

    base: Surprise
    other: Surprise
    kld: np.ndarray
    """float64 (len(ids),), nats; NaN for the first token."""
    same_top: np.ndarray
    """bool (len(ids),); False where kld is NaN: a token not compared."""
    dp: np.ndarray
    """float64 (len(ids),): p_other - p_base of the text's token; NaN for the first."""
    files: tuple[QuantFile, QuantFile] | None = None
    """The two models' files and decode speeds, when measured (NextTokenViews.compare)."""

    @property
    def kld_mean(self) -> float:
        return float(np.nanmean(self.kld))

    @property
    def same_top_share(self) -> float:
        return float(self.same_top[np.isfinite(self.kld)].mean())

    def describe(self) -> list[str]:
        """Plain lines: each file with its size and speeds, then what the second costs."""
        lines = []
        for file, found in zip(self.files or (), (self.base, self.other)):
            lines.append(f"{file.name}: {_mib(file.size_bytes)}, decodes {file.decode_tps:.0f} tok/s, evaluates "
                         f"{found.tokens_per_second:.0f} tok/s, perplexity {found.ppl:.3f}")
        lines.append(f"the second against the first, over {int(np.isfinite(self.kld).sum()):,} tokens: mean KL "
                     f"divergence {self.kld_mean:.4f} nats, the same top token at {self.same_top_share:.1%}, the "
                     f"text's token's probability {np.nanmean(self.dp):+.4f} on average")
        return lines

    def llama_figures(self) -> tuple[float, float] | None:
        """(mean KLD, same-top share) over the tokens llama-perplexity --kl-divergence scores, to
        compare with its "Mean KLD" and "Same top p"; None when it would refuse the text."""
        positions = llama_positions(len(self.kld), self.base.ctx)
        if positions is None:
            return None
        return float(self.kld[positions].mean()), float(self.same_top[positions].mean())

    def to_json(self) -> dict:
        data = self.base.to_json()
        llama = self.llama_figures()
        data.update({"kld_mean": _round(self.kld_mean), "same_top": _round(self.same_top_share),
                     "files": None if self.files is None else [file.to_json() for file in self.files],
                     "llama_kl_divergence": None if llama is None else
                     {"kld_mean": _round(llama[0]), "same_top": _round(llama[1])},
                     "compare": {"ppl": _round(self.other.ppl), "llama_ppl": None if self.other.llama_ppl is None
                                 else _round(self.other.llama_ppl), "seconds": round(self.other.seconds, 3)}})
        for token, kld, same, dp in zip(data["tokens"], self.kld.tolist(), self.same_top.tolist(), self.dp.tolist()):
            token["kld"] = _round(kld) if math.isfinite(kld) else None
            token["same_top"] = bool(same) if math.isfinite(kld) else None
            token["dp"] = _round(dp) if math.isfinite(dp) else None
        return data


def _log_softmax(rows: np.ndarray) -> np.ndarray:
    z = rows - rows.max(axis=1, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=1, keepdims=True, dtype=np.float64)).astype(np.float32)


def compare(ids: Sequence[int], pieces: Sequence[str], ctx: int, decode: DecodeWindow, decode_other: DecodeWindow,
            *, bos: int | None, only_scored: bool = False,
            should_stop: Callable[[], bool] = lambda: False) -> QuantCost | None:
    """Both models over the same windows of `ids` (see `measure`), compared token by token; None
    when should_stop said so between windows."""
    ids = list(ids)
    kld, other_nll = np.full(len(ids), np.nan), np.full(len(ids), np.nan)
    same = np.zeros(len(ids), dtype=bool)
    spans = iter(scored_windows(len(ids), ctx, only_scored))
    seconds = [0.0, 0.0]  # each model's decoding alone, so the two speeds compare (not the comparison's work)

    def both(window: Sequence[int], first_row: int) -> np.ndarray:
        start, end, _ = next(spans)
        started = time.perf_counter()
        logits = decode(window, first_row)
        seconds[0] += time.perf_counter() - started
        started = time.perf_counter()
        other = decode_other(window, first_row)
        seconds[1] += time.perf_counter() - started
        targets = window_targets(ids, start, end, first_row, only_scored)
        n, at = len(targets), start + first_row + 1
        log_a = _log_softmax(logits[:n].astype(np.float32))
        log_b = _log_softmax(other[:n, :logits.shape[1]].astype(np.float32))
        kld[at:at + n] = (np.exp(log_a) * (log_a - log_b)).sum(axis=1, dtype=np.float64)
        same[at:at + n] = log_a.argmax(axis=1) == log_b.argmax(axis=1)
        other_nll[at:at + n] = nll_rows(other[:n], targets)  # as `measure` computes the first's
        return logits

    first = measure(ids, pieces, ctx, both, bos=bos, only_scored=only_scored, should_stop=should_stop)
    if first is None:
        return None
    first = Surprise(first.ids, first.pieces, first.surprise, ctx, first.llama_ppl, first.llama_scored, seconds[0])
    llama_ppl, scored = llama_estimate(other_nll, ctx)
    second = Surprise(first.ids, first.pieces, other_nll, ctx, llama_ppl, scored, seconds[1])
    return QuantCost(first, second, kld, same, np.exp(-other_nll) - np.exp(-first.surprise))


def _mib(size: int) -> str:
    return f"{size / 2**20:,.1f} MiB"


def _round(x: float) -> float:
    return round(float(x), 6)
