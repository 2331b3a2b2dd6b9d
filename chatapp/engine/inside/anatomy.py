"""A model's anatomy from its GGUF header: what it is made of, what each part weighs, and
what one token costs in the KV cache.

Built from the header and tensor table alone (chatapp.engine.models.gguf_header): no weights are
read and llama.cpp is not loaded. Key names and tensor-name patterns are the gguf package's
(gguf.Keys, gguf.TENSOR_NAMES), so every architecture llama.cpp knows is read the same way.
A fact the file does not state is None, shown as "unknown", never a guess. Where llama.cpp
itself derives a value the file leaves out (head size = n_embd / n_head), the derivation is
spelled out in the KV-cache steps or the notes. A header whose figures cannot all be true
(10^9 blocks, negative heads, a 10 MB name) is refused first, in one line
(chatapp.engine.inside.consistency), rather than shown as fact.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from functools import cache
from pathlib import Path

from gguf.constants import GGML_QUANT_SIZES, TENSOR_NAMES, Keys

from chatapp.engine.inside import consistency
from chatapp.engine.models.gguf_header import ArraySummary, GGUFHeader, TensorEntry, read_header, tensor_nbytes
from chatapp.engine.models.quant import KV_GGML_TYPES, ggml_type_name, info_from_header
from chatapp.errors import ConfigError

FAMILIES = ("embedding", "attention", "ffn", "experts", "norms", "output", "other")
"""Tensor families, in the order a token meets them."""
FAMILY_LABELS = {"embedding": "embedding", "attention": "attention", "ffn": "feed-forward",
                 "experts": "experts (MoE)", "norms": "norms", "output": "output head", "other": "other"}
_EMBEDDINGS = {"TOKEN_EMBD", "POS_EMBD", "TOKEN_TYPES", "PER_LAYER_TOKEN_EMBD"}
_BLOCK = re.compile(r"^blk\.(\d+)\.")


@dataclass(frozen=True)
class Tally:
    tensors: int = 0
    params: int = 0
    bytes: int = 0

    def plus(self, params: int, n_bytes: int) -> Tally:
        return Tally(self.tensors + 1, self.params + params, self.bytes + n_bytes)


@dataclass(frozen=True)
class TensorFact:
    name: str
    shape: tuple[int, ...]
    """In GGUF order: the row length first (token_embd is n_embd × n_vocab)."""
    type: str
    params: int
    bytes: int


@dataclass(frozen=True)
class Block:
    index: int
    params: int
    bytes: int
    family_bytes: dict[str, int]


@dataclass(frozen=True)
class KVCost:
    kv_type: str
    bytes_per_element: float
    elements_per_token: int | None
    bytes_per_token: int | None
    steps: list[str]
    """The derivation, one line per step, with the key each figure comes from."""


@dataclass(frozen=True)
class Anatomy:
    path: str
    name: str
    arch: str
    file_type: str
    context_length: int | None
    n_vocab: int | None
    n_embd: int | None
    n_layer: int | None
    n_head: int | None
    n_head_kv: int | None
    """The largest over layers when the file gives one per layer (see n_head_kv_per_layer)."""
    n_head_kv_per_layer: list[int] | None
    gqa_ratio: float | None
    head_dim: int | None
    """Key length per head; value_dim is the value length."""
    value_dim: int | None
    n_ff: int | None
    expert_count: int | None
    """0 for a dense model (no expert tensors, no expert keys)."""
    expert_used_count: int | None
    expert_shared_count: int | None
    n_ff_expert: int | None
    rope_base: float | None
    sliding_window: int | None
    embedding: TensorFact | None
    output: TensorFact | None
    """None when the output head is tied to the embedding (output_tied)."""
    output_tied: bool
    families: dict[str, Tally]
    blocks: list[Block]
    params_total: int
    params_active: int | None
    """Parameters one token runs through: all of them, less the experts a MoE router leaves out."""
    weight_bytes: int
    kv: KVCost
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        data = asdict(self)
        data["tensors"] = data.pop("families")
        kv = data.pop("kv")
        data.update(kv_type=kv["kv_type"], kv_bytes_per_token=kv["bytes_per_token"],
                    kv_elements_per_token=kv["elements_per_token"], kv_derivation=kv["steps"])
        return data


@cache
def _tensor_kinds() -> dict[str, str]:
    """Tensor-name pattern ("blk.{bid}.attn_q") -> gguf's MODEL_TENSOR name ("ATTN_Q")."""
    kinds: dict[str, str] = {}
    for member, pattern in TENSOR_NAMES.items():
        kinds.setdefault(pattern, member.name)
    return kinds


def family_of(kind: str | None) -> str:
    """The family of a gguf MODEL_TENSOR name; norms first, since ATTN_NORM is a norm."""
    if kind is None:
        return "other"
    if kind in _EMBEDDINGS:
        return "embedding"
    if kind == "OUTPUT":
        return "output"
    if "NORM" in kind:
        return "norms"
    if kind.startswith("MOE_") or (kind.startswith("FFN_") and ("EXP" in kind or kind.startswith("FFN_GATE_INP"))):
        return "experts"
    if kind.startswith("ATTN_"):
        return "attention"
    if kind.startswith("FFN_"):
        return "ffn"
    return "other"


def tensor_kind(name: str) -> str | None:
    """gguf's MODEL_TENSOR name for a tensor such as "blk.3.attn_q.weight", or None."""
    pattern = _BLOCK.sub("blk.{bid}.", name)
    kinds = _tensor_kinds()
    return kinds.get(pattern.rsplit(".", 1)[0]) or kinds.get(pattern)


def _routed(tensor: TensorEntry) -> bool:
    """A tensor holding every routed expert (the last dimension counts them)."""
    return tensor_kind(tensor.name) in ("FFN_GATE_EXP", "FFN_DOWN_EXP", "FFN_UP_EXP", "FFN_GATE_UP_EXP",
                                        "FFN_NORM_EXP")


class _Keys:
    """Metadata read through gguf's key templates; long arrays the header skipped read as unknown."""

    def __init__(self, metadata: dict, arch: str, notes: list[str]):
        self.metadata, self.arch, self.notes = metadata, arch, notes

    def raw(self, template: str):
        key = template.format(arch=self.arch)
        value = self.metadata.get(key)
        if isinstance(value, ArraySummary):
            note = f"{key} is an array of {value.length}; its values were not read"
            if note not in self.notes:
                self.notes.append(note)
            return None
        return value

    def number(self, template: str):
        value = self.raw(template)
        return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None

    def per_layer(self, template: str) -> list[int] | int | None:
        value = self.raw(template)
        if isinstance(value, list):
            return [int(v) for v in value]
        return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


@dataclass(frozen=True)
class _Heads:
    """What the file says about attention heads, for the KV-cache derivation."""

    n_head: int | None
    per_layer: list[int] | None
    """Query heads per layer, when they vary."""
    kv: list[int] | int | None
    """K/V heads: one number, one per layer, or None when the file gives none."""
    k_len: int | None
    v_len: int | None
    steps: list[str]
    """How the head sizes were found."""


def _uniform(value: list[int] | int | None) -> tuple[int | None, list[int] | None]:
    """(the largest value, the per-layer list when it varies)."""
    if isinstance(value, list):
        if not value:
            return None, None
        return max(value), (value if len(set(value)) > 1 else None)
    return value, None


def _fact(tensor: TensorEntry) -> TensorFact:
    return TensorFact(tensor.name, tensor.shape, ggml_type_name(tensor.ggml_type), math.prod(tensor.shape),
                      tensor_nbytes(tensor))


def anatomy_from_header(path: Path, header: GGUFHeader, kv_type: str = "f16") -> Anatomy:
    if kv_type not in KV_GGML_TYPES:
        raise ConfigError(f"kv_type must be one of {', '.join(KV_GGML_TYPES)}, got {kv_type!r}")
    consistency.check(header)  # before anything sized by the header's counts is built
    info = info_from_header(path, header)
    arch = info.architecture
    notes: list[str] = []
    keys = _Keys(header.metadata, arch, notes)

    families: dict[str, Tally] = {name: Tally() for name in FAMILIES}
    blocks: dict[int, dict] = defaultdict(lambda: {"params": 0, "bytes": 0, "family_bytes": defaultdict(int)})
    routed_params, by_name = 0, {t.name: t for t in header.tensors}
    for tensor in header.tensors:
        fact = _fact(tensor)
        family = family_of(tensor_kind(tensor.name))
        families[family] = families[family].plus(fact.params, fact.bytes)
        if (match := _BLOCK.match(tensor.name)) is not None:
            block = blocks[int(match.group(1))]
            block["params"] += fact.params
            block["bytes"] += fact.bytes
            block["family_bytes"][family] += fact.bytes
        if _routed(tensor):
            routed_params += fact.params

    expert_count = keys.number(Keys.LLM.EXPERT_COUNT)
    expert_used = keys.number(Keys.LLM.EXPERT_USED_COUNT)
    has_experts = families["experts"].tensors > 0
    if expert_count is None and expert_used is None and not has_experts:
        expert_count = expert_used = 0
    if routed_params == 0:
        params_active = info.n_params
    elif expert_count and expert_used is not None:
        params_active = info.n_params - routed_params + routed_params * expert_used // expert_count
    else:
        params_active = None
        notes.append("the file has expert tensors but not both expert_count and expert_used_count")
    if any(tensor_kind(t.name) in ("FFN_GATE_CHEXP", "FFN_DOWN_CHEXP", "FFN_UP_CHEXP") for t in header.tensors):
        params_active = None
        notes.append("chunked experts (ffn_*_chexps): how many run per token is not in the file")

    n_embd = keys.number(Keys.LLM.EMBEDDING_LENGTH)
    n_layer = keys.number(Keys.LLM.BLOCK_COUNT)
    n_head, heads_per_layer = _uniform(keys.per_layer(Keys.Attention.HEAD_COUNT))
    kv_raw = keys.per_layer(Keys.Attention.HEAD_COUNT_KV)
    n_head_kv, kv_per_layer = _uniform(kv_raw)
    n_ff, _ = _uniform(keys.per_layer(Keys.LLM.FEED_FORWARD_LENGTH))
    head_dim, value_dim, head_steps = _head_sizes(keys, n_embd, n_head, heads_per_layer)
    gqa = None
    if n_head and n_head_kv and heads_per_layer is None and kv_per_layer is None:
        gqa = n_head / n_head_kv
    elif heads_per_layer or kv_per_layer:
        notes.append("heads vary by layer, so there is no single GQA ratio")

    if keys.number(Keys.Attention.SLIDING_WINDOW) and keys.raw(Keys.Attention.SLIDING_WINDOW_PATTERN) is None:
        notes.append("which layers use the sliding window is not in the file: llama.cpp sets it per architecture")
    embedding = by_name.get("token_embd.weight")
    output = by_name.get("output.weight")
    tokens = header.metadata.get(Keys.Tokenizer.LIST)
    n_vocab = (tokens.length if isinstance(tokens, ArraySummary) else len(tokens) if isinstance(tokens, list)
               else keys.number(Keys.LLM.VOCAB_SIZE))
    kv = kv_cost(keys, kv_type, n_layer, _Heads(n_head, heads_per_layer, kv_raw, head_dim, value_dim, head_steps))
    return Anatomy(
        path=str(path), name=info.name, arch=arch, file_type=info.file_type,
        context_length=keys.number(Keys.LLM.CONTEXT_LENGTH), n_vocab=n_vocab, n_embd=n_embd, n_layer=n_layer,
        n_head=n_head, n_head_kv=n_head_kv, n_head_kv_per_layer=kv_per_layer, gqa_ratio=gqa,
        head_dim=head_dim, value_dim=value_dim, n_ff=n_ff, expert_count=expert_count,
        expert_used_count=expert_used, expert_shared_count=keys.number(Keys.LLM.EXPERT_SHARED_COUNT),
        n_ff_expert=keys.number(Keys.LLM.EXPERT_FEED_FORWARD_LENGTH), rope_base=keys.number(Keys.Rope.FREQ_BASE),
        sliding_window=keys.number(Keys.Attention.SLIDING_WINDOW),
        embedding=_fact(embedding) if embedding else None, output=_fact(output) if output else None,
        output_tied=output is None and embedding is not None,
        families={name: tally for name, tally in families.items() if tally.tensors},
        blocks=[Block(i, b["params"], b["bytes"], dict(b["family_bytes"])) for i, b in sorted(blocks.items())],
        params_total=info.n_params, params_active=params_active, weight_bytes=info.weight_bytes, kv=kv,
        notes=notes,
    )


def _head_sizes(keys: _Keys, n_embd, n_head, heads_per_layer) -> tuple[int | None, int | None, list[str]]:
    """Key and value length per head, and where each came from."""
    k_len, v_len = keys.number(Keys.Attention.KEY_LENGTH), keys.number(Keys.Attention.VALUE_LENGTH)
    steps = []
    if k_len is not None:
        steps.append(f"head size: {k_len} (attention.key_length)")
    elif n_embd and n_head and not heads_per_layer:
        k_len = n_embd // n_head
        steps.append(f"head size: n_embd / n_head = {n_embd:,} / {n_head} = {k_len} "
                     "(attention.key_length is not in the file; llama.cpp derives it so)")
    else:
        steps.append("head size: unknown (no attention.key_length, and no single n_embd / n_head)")
    if v_len is None and k_len is not None:
        v_len = k_len
        steps.append(f"value size: {v_len} (no attention.value_length: llama.cpp uses the key length)")
    elif v_len is not None and v_len != k_len:
        steps.append(f"value size: {v_len} (attention.value_length)")
    return k_len, v_len, steps


def kv_cost(keys: _Keys, kv_type: str, n_layer: int | None, heads: _Heads) -> KVCost:
    """The KV cache's bytes per token, derived the way llama.cpp sizes its cache, step by step."""
    kv_raw, k_len, v_len = heads.kv, heads.k_len, heads.v_len
    block, type_size = GGML_QUANT_SIZES[KV_GGML_TYPES[kv_type]]
    per_element = type_size / block
    steps: list[str] = []
    unknown = KVCost(kv_type, per_element, None, None, steps)
    if keys.number(Keys.Attention.KV_LORA_RANK):
        steps.append("unknown: this model caches a compressed latent (attention.kv_lora_rank), "
                     "not K/V heads × head size")
        return unknown
    if keys.number(Keys.Attention.KEY_LENGTH_SWA) is not None:
        steps.append("unknown: sliding-window layers have their own head size (attention.key_length_swa)")
        return unknown
    if not n_layer:
        steps.append("unknown: the file gives no block_count")
        return unknown
    steps.append(f"layers: {n_layer} (block_count)")
    if kv_raw is None:
        kv_raw = heads.per_layer or heads.n_head
        if kv_raw is None:
            steps.append("unknown: the file gives neither attention.head_count_kv nor attention.head_count")
            return unknown
        steps.append("K/V heads: no attention.head_count_kv, so llama.cpp uses head_count")
    if isinstance(kv_raw, list):
        total = sum(kv_raw)
        steps.append(f"K/V heads, summed over the {len(kv_raw)} layers: {total:,} "
                     f"({sum(1 for h in kv_raw if h)} layers have attention; attention.head_count_kv)")
    else:
        steps.append(f"K/V heads per layer: {kv_raw} (attention.head_count_kv)")
    steps += heads.steps
    if k_len is None or v_len is None:
        return unknown
    if isinstance(kv_raw, list):
        elements = total * (k_len + v_len)
        steps.append(f"elements per token: {total:,} × ({k_len} + {v_len}) = {elements:,}")
    else:
        elements = n_layer * kv_raw * (k_len + v_len)
        formula = (f"2 × {n_layer} × {kv_raw} × {k_len}" if k_len == v_len
                   else f"{n_layer} × {kv_raw} × ({k_len} + {v_len})")
        steps.append(f"elements per token: {formula} = {elements:,}  (K and V × layers × K/V heads × head size)")
    size = f"{type_size} bytes per {block} elements = {per_element:g}" if block > 1 else f"{type_size}"
    steps.append(f"bytes per element ({kv_type}): {size}")
    n_bytes = elements * type_size // block
    steps.append(f"bytes per token: {elements:,} × {per_element:g} = {n_bytes:,}")
    window = keys.number(Keys.Attention.SLIDING_WINDOW)
    if window:
        steps.append(f"sliding window of {window:,} tokens on some layers: chatapp asks llama.cpp for full-size "
                     "caches there too (swa_full), so every layer keeps every token")
    return KVCost(kv_type, per_element, elements, n_bytes, steps)


def anatomy(path: Path, kv_type: str = "f16") -> Anatomy:
    """Read a GGUF file's header and describe the model. Raises HeaderError (a ValueError) or OSError."""
    path = Path(path).resolve()
    return anatomy_from_header(path, read_header(path), kv_type)
