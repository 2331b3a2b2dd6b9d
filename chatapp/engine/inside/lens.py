"""The logit lens: what each layer would say the next token is.

llama.cpp names every layer's output, the residual stream after the block, `l_out-<layer>`.
A tap context (chatapp.engine.local.llama.TapContext) reads that row for the position being
predicted, at every layer, while it decodes the text. Each row is then put through what the
model does after its last layer: the final norm (`output_norm`, RMS or layer norm with the
file's epsilon) and the output head (`output.weight`, or `token_embd.weight` when the two are
tied), dequantized from the GGUF file with the gguf package, then a softmax. For the last layer
this is the model's own computation, so its probabilities must equal those of llama.cpp's
logits: `Lens.last_layer_gap` says by how much they differ.

One detail makes them equal to about 1e-5 instead of 1e-3: on the CPU, ggml multiplies a
quantized weight matrix by activations it first quantizes to 8 bits (Q8_0 blocks of 32 for
Q4_0, Q5_0 and Q8_0 weights, Q8_1 for Q4_1 and Q5_1, Q8_K blocks of 256 for the k-quants; F16
weights by F16 activations). `OutputHead` rounds the normed row the same way before the product.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from gguf.constants import GGMLQuantizationType as Q
from gguf.quants import dequantize

from chatapp.engine.models.gguf_header import GGUFHeader, TensorEntry, read_header, tensor_nbytes
from chatapp.errors import InputError, ModelError

LAYER_OUTPUT = "l_out-"
"""llama.cpp's name of each layer's output ("l_out-<layer>")."""
TOP = 10


def _activation_blocks(weight_type: int) -> tuple[int, bool] | None:
    """(block size, scale rounded to f16) of the 8-bit activations ggml's CPU product uses for a
    weight type; None for float weights."""
    if weight_type in (Q.Q4_0, Q.Q5_0, Q.Q8_0, Q.Q4_1, Q.Q5_1, Q.IQ4_NL):
        return 32, True
    if weight_type in (Q.F32, Q.F16, Q.BF16):
        return None
    return 256, False  # k-quants and i-quants: Q8_K


def _round_activations(x: np.ndarray, weight_type: int) -> np.ndarray:
    """`x` (rows, n_embd) as ggml's CPU matrix product sees it for this weight type."""
    if weight_type == Q.F16:
        return x.astype(np.float16).astype(np.float32)
    if weight_type == Q.BF16:
        bits = x.astype(np.float32).view(np.uint32)
        return ((bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000).view(np.float32)
    blocks = _activation_blocks(weight_type)
    if blocks is None or x.shape[-1] % blocks[0]:
        return x
    size, f16_scale = blocks
    b = x.reshape(len(x), -1, size)
    amax = np.abs(b).max(axis=2, keepdims=True)
    d = amax / 127
    inv = np.divide(1.0, d, out=np.zeros_like(d), where=d > 0)
    q = np.clip(np.round(b * inv), -127, 127)  # ggml rounds half away from zero; ties are measure-zero here
    if f16_scale:
        d = d.astype(np.float16).astype(np.float32)
    return (q * d).reshape(x.shape).astype(np.float32)


def _tensor(path: Path, header: GGUFHeader, entry: TensorEntry) -> np.ndarray:
    raw = np.memmap(path, dtype=np.uint8, mode="r", offset=header.data_offset + entry.offset,
                    shape=(tensor_nbytes(entry),))
    shape = tuple(reversed(entry.shape))
    try:
        values = dequantize(raw.reshape(shape[0], -1) if len(shape) > 1 else raw, Q(entry.ggml_type))
    except (NotImplementedError, ValueError) as exc:
        raise ModelError(f"cannot dequantize {entry.name}: {exc}") from None
    return np.ascontiguousarray(np.asarray(values, dtype=np.float32).reshape(shape))


class OutputHead:
    """The model's final norm and output head, from its GGUF file, as float32."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path).resolve()
        header = read_header(self.path)
        tensors = {t.name: t for t in header.tensors}
        meta = header.metadata
        arch = str(meta.get("general.architecture", ""))
        head = tensors.get("output.weight") or tensors.get("token_embd.weight")
        norm = tensors.get("output_norm.weight")
        if head is None or norm is None:
            raise ModelError("the model has no output_norm and output head to put a layer's output through")
        self.tied = "output.weight" not in tensors
        self.head_type = head.ggml_type
        self.weight = _tensor(self.path, header, head)
        self.norm = _tensor(self.path, header, norm)
        self.norm_bias = _tensor(self.path, header, tensors["output_norm.bias"]) if "output_norm.bias" in tensors \
            else None
        self.bias = _tensor(self.path, header, tensors["output.bias"]) if "output.bias" in tensors else None
        key = "layer_norm_epsilon" if self.norm_bias is not None else "layer_norm_rms_epsilon"
        self.eps = float(meta.get(f"{arch}.attention.{key}", 1e-5))
        self.softcap = float(meta.get(f"{arch}.final_logit_softcapping", 0.0) or 0.0)
        self.scale = float(meta.get(f"{arch}.logit_scale", 1.0) or 1.0)

    @property
    def n_vocab(self) -> int:
        return self.weight.shape[0]

    def normed(self, rows: np.ndarray) -> np.ndarray:
        x = np.asarray(rows, dtype=np.float32)
        if self.norm_bias is not None:
            x = x - x.mean(axis=1, keepdims=True)
            return x / np.sqrt((x * x).mean(axis=1, keepdims=True) + self.eps) * self.norm + self.norm_bias
        return x / np.sqrt((x * x).mean(axis=1, keepdims=True) + self.eps) * self.norm

    def logits(self, rows: np.ndarray) -> np.ndarray:
        """(rows, n_vocab) logits of residual rows (rows, n_embd)."""
        out = _round_activations(self.normed(rows), self.head_type) @ self.weight.T
        if self.bias is not None:
            out += self.bias
        if self.scale != 1.0:
            out /= self.scale
        if self.softcap:
            out = np.tanh(out / self.softcap) * self.softcap
        return out


def softmax(logits: np.ndarray) -> np.ndarray:
    z = np.asarray(logits, dtype=np.float64)
    e = np.exp(z - z.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


@dataclass(frozen=True)
class LensCandidate:
    id: int
    piece: str
    p: float

    def to_json(self) -> dict:
        return {"id": self.id, "piece": self.piece, "p": round(self.p, 6)}


@dataclass(frozen=True)
class LensLayer:
    layer: int
    top: tuple[LensCandidate, ...]
    rank: int
    """The token's rank at this layer (1: top)."""
    p: float
    """The token's probability at this layer."""

    def to_json(self) -> dict:
        return {"layer": self.layer, "top": [c.to_json() for c in self.top], "rank": self.rank,
                "p": round(self.p, 6)}


@dataclass(frozen=True)
class Lens:
    """The lens at one position: what each layer predicts for the next token."""

    position: int
    """The position whose output is read; it predicts the token at position + 1."""
    token: int
    piece: str
    given: bool
    """Whether `token` is the text's own next token (else the model's top choice)."""
    layers: tuple[LensLayer, ...]
    logits_top: tuple[LensCandidate, ...]
    """The top of llama.cpp's own logits at this position."""
    last_layer_gap: float
    """Largest |p_lens - p_llama.cpp| over the vocabulary at the last layer."""
    tied: bool

    @property
    def first_top(self) -> int | None:
        """The first layer from which on the token stays top-1, or None if the last layer's top differs."""
        first = None
        for layer in self.layers:
            if layer.rank == 1:
                first = layer.layer if first is None else first
            else:
                first = None
        return first

    def how(self) -> str:
        head = "the token embeddings (tied)" if self.tied else "output.weight"
        return (f"Each layer's output (llama.cpp's l_out) put through the final norm and {head}, read from the "
                f"GGUF file; the last layer matches llama.cpp's logits within {self.last_layer_gap:.1e}.")

    def to_json(self) -> dict:
        return {"position": self.position, "token": {"id": self.token, "piece": self.piece, "given": self.given},
                "first_top": self.first_top, "last_layer_gap": float(f"{self.last_layer_gap:.3g}"),
                "layers": [layer.to_json() for layer in self.layers],
                "logits_top": [c.to_json() for c in self.logits_top]}


def _top(p: np.ndarray, k: int, piece: Callable[[int], str]) -> tuple[LensCandidate, ...]:
    ids = np.argpartition(-p, k - 1)[:k]
    ids = ids[np.argsort(-p[ids], kind="stable")]
    return tuple(LensCandidate(int(i), piece(int(i)), float(p[i])) for i in ids)


def read(head: OutputHead, residuals: dict[str, np.ndarray], logits: np.ndarray, position: int,
         token: int | None, piece: Callable[[int], str], k: int = TOP) -> Lens:
    """The lens from one position's tapped rows (`residuals`, by tensor name) and llama.cpp's
    logits there; `token`: the text's next token, or None for the model's top choice."""
    layers = sorted(int(name[len(LAYER_OUTPUT):]) for name in residuals if name.startswith(LAYER_OUTPUT))
    if not layers:
        raise ModelError("llama.cpp named no layer outputs (l_out) in this model's graph")
    rows = np.stack([residuals[f"{LAYER_OUTPUT}{layer}"] for layer in layers])
    probs = softmax(head.logits(rows))
    real = softmax(logits[: head.n_vocab])
    given = token is not None
    if token is None:
        token = int(np.argmax(real))
    k = max(1, min(k, head.n_vocab))
    out = []
    for layer, p in zip(layers, probs):
        rank = int((p > p[token]).sum()) + 1
        out.append(LensLayer(layer, _top(p, k, piece), rank, float(p[token])))
    gap = float(np.abs(probs[-1] - real).max()) if math.isfinite(float(probs[-1].sum())) else math.inf
    return Lens(position, token, piece(token), given, tuple(out), _top(real, k, piece), gap, head.tied)


def positions_for(n_tokens: int, token: int | None) -> tuple[int, bool]:
    """Which position to read for `--token N` (1-based: the lens predicting token N from those
    before it) or, without it, the next token after the text: (position, token given)."""
    if token is None:
        return n_tokens - 1, False
    if n_tokens < 2:
        raise InputError(f"--token needs a text of at least 2 tokens (this one is {n_tokens}): "
                         "the first token has nothing before it")
    if not 2 <= token <= n_tokens:
        why = ": the first token has nothing before it" if token == 1 else ""
        raise InputError(f"--token must be between 2 and {n_tokens} (the text's tokens), got {token}{why}")
    return token - 2, True
