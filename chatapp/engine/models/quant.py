"""What a GGUF model is made of: shape, quantization mix, bits per weight, KV-cache cost, and
what one decoded token reads.

Built from the header alone (chatapp.engine.models.gguf_header), so no weights are read. The result
is cached as JSON under paths.cache_dir(), keyed by the file's (resolved path, size, mtime_ns). A
cached entry is checked field by field on reading (anyone can edit the file): one that is not
what this module writes is built again from the header and the cache rewritten.
"""

from __future__ import annotations

import math
import types
import typing
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType, LlamaFileType

from chatapp.config import KV_TYPES
from chatapp.engine.filecache import MAX_CACHE_BYTES, FileCache
from chatapp.engine.models.gguf_header import (
    ArraySummary, GGUFHeader, HeaderError, TensorEntry, read_header, tensor_nbytes)
from chatapp.errors import ConfigError

SCHEMA = 2
KV_GGML_TYPES = {name: GGMLQuantizationType[name.upper()] for name in KV_TYPES}


@dataclass(frozen=True)
class TensorTypeStats:
    count: int
    n_elements: int
    bytes: int
    example: str
    """The largest tensor of this type, e.g. token_embd.weight."""


@dataclass(frozen=True)
class ModelInfo:
    path: str
    name: str
    architecture: str
    file_type: str
    """The quantization recipe from general.file_type, e.g. "Q4_1" or "Q4_K_M"."""
    n_params: int
    weight_bytes: int
    bits_per_weight: float
    context_length: int
    """The context length the model was trained for."""
    n_layer: int
    n_embd: int
    n_ff: int
    n_head: int
    n_head_kv: int
    key_length: int
    value_length: int
    sliding_window: int | None
    vocab_size: int
    kv_elements_per_token: int
    """K and V elements one token adds to the cache, over all layers."""
    file_size: int
    expert_count: int
    """Experts per MoE layer (0 for a dense model)."""
    expert_used_count: int
    tied_output: bool
    """No output.weight: the token-embedding table is also the output head."""
    decode_weight_bytes: int
    """Weight bytes one decoded token reads (see `per_token_use`)."""
    active_params: int
    """Weights one token is multiplied by: about half of its FLOPs (2 per weight)."""
    tensor_mix: dict[str, TensorTypeStats] = field(default_factory=dict)
    """Per ggml type, largest share of bytes first."""

    @classmethod
    def from_json(cls, data: object) -> ModelInfo:
        """The inverse of asdict(); ValueError, naming the field, for anything of another shape."""
        _check_fields(cls, data)
        mix = data["tensor_mix"]
        if not isinstance(mix, dict):
            raise ValueError("tensor_mix is not a mapping")
        for stats in mix.values():
            _check_fields(TensorTypeStats, stats)
        return cls(**{**data, "tensor_mix": {name: TensorTypeStats(**stats) for name, stats in mix.items()}})


def _fits(value: object, kind: object) -> bool:
    """Whether a JSON value is of a field's type, as asdict() writes it (counts are never negative)."""
    if isinstance(kind, types.UnionType):
        return any(_fits(value, option) for option in typing.get_args(kind))
    if kind is type(None):
        return value is None
    if kind is bool:
        return isinstance(value, bool)
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool) and value >= 0
    if kind is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value >= 0
    if kind is str:
        return isinstance(value, str)
    return True  # tensor_mix: checked entry by entry by from_json


def _check_fields(cls: type, data: object) -> None:
    if not isinstance(data, dict):
        raise ValueError(f"{cls.__name__} is not a mapping")
    hints = typing.get_type_hints(cls)
    names = {f.name for f in fields(cls)}
    if set(data) != names:
        raise ValueError(f"{cls.__name__} has other fields than {sorted(names)}")
    for name in names:
        if not _fits(data[name], hints[name]):
            raise ValueError(f"{cls.__name__}.{name} is {data[name]!r}")


def _int(value, default: int = 0) -> int:
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else default


def _most(value) -> int:
    """A per-layer array's largest value, or the scalar itself."""
    return max((_int(v) for v in value), default=0) if isinstance(value, list) else _int(value)


def _file_type_name(value) -> str:
    try:
        return LlamaFileType(_int(value, -1)).name.removeprefix("MOSTLY_").removeprefix("ALL_")
    except ValueError:
        return "unknown"


def ggml_type_name(ggml_type: int) -> str:
    """A ggml type number's name, e.g. "Q4_1"; "typeN" for one this gguf package does not know."""
    try:
        return GGMLQuantizationType(ggml_type).name
    except ValueError:
        return f"type{ggml_type}"


def _kv_heads(meta: dict, arch: str, n_layer: int, n_head: int) -> list[int]:
    """K/V heads per layer; some models (OpenELM) vary them by layer."""
    raw = meta.get(f"{arch}.attention.head_count_kv", n_head)
    if isinstance(raw, list):
        return [_int(v) for v in raw]
    return [_int(raw)] * n_layer


LOOKUP_TABLES = ("token_embd.weight", "position_embd.weight", "token_types.weight", "per_layer_token_embd.weight")
"""Tables a token reads one row of (the row of its id or position), not the whole matrix."""


def per_token_use(tensors: list[TensorEntry], expert_count: int, expert_used: int) -> tuple[int, int, bool]:
    """(weight bytes read, weights multiplied, tied output head) for one decoded token.

    Every matrix is read once, except: a lookup table gives one row, unless the token embedding
    is tied to the output head (no output.weight), which then reads all of it; a MoE layer's
    expert tensors (named *_exps) are read for expert_used of expert_count experts only.
    """
    tied = not any(t.name == "output.weight" for t in tensors)
    read = params = 0
    for tensor in tensors:
        n_bytes, n = tensor_nbytes(tensor), math.prod(tensor.shape)
        if tensor.name in LOOKUP_TABLES and not (tied and tensor.name == "token_embd.weight"):
            rows = max(1, n // tensor.shape[0]) if tensor.shape else 1
            read += n_bytes // rows
        elif "_exps." in tensor.name and expert_count > 0:
            share = min(expert_used, expert_count) / expert_count
            read += int(n_bytes * share)
            params += int(n * share)
        else:
            read += n_bytes
            params += n
    return read, params, tied


MAX_LAYERS = 512
"""llama.cpp's LLAMA_MAX_LAYERS (src/llama-hparams.h): a header claiming more blocks is no model
llama.cpp loads, and per-layer figures built for 10^9 of them would stall the scan."""


def info_from_header(path: Path, header: GGUFHeader) -> ModelInfo:
    meta = header.metadata
    arch = str(meta.get("general.architecture", "unknown"))
    n_layer = _int(meta.get(f"{arch}.block_count"))
    if not 0 <= n_layer <= MAX_LAYERS:
        raise HeaderError(f"{arch}.block_count is {n_layer:,} (llama.cpp loads at most {MAX_LAYERS})")
    n_embd = _int(meta.get(f"{arch}.embedding_length"))
    n_head = _most(meta.get(f"{arch}.attention.head_count"))
    kv_heads = _kv_heads(meta, arch, n_layer, n_head)
    key_length = _int(meta.get(f"{arch}.attention.key_length"), n_embd // n_head if n_head else 0)
    value_length = _int(meta.get(f"{arch}.attention.value_length"), key_length)
    tokens = meta.get("tokenizer.ggml.tokens")
    vocab = tokens.length if isinstance(tokens, ArraySummary) else len(tokens) if isinstance(tokens, list) else 0

    mix: dict[str, list] = {}
    for tensor in header.tensors:
        n_bytes = tensor_nbytes(tensor)
        stats = mix.setdefault(ggml_type_name(tensor.ggml_type), [0, 0, 0, tensor.name, 0])
        stats[0] += 1
        stats[1] += math.prod(tensor.shape)
        stats[2] += n_bytes
        if n_bytes > stats[4]:
            stats[3:] = [tensor.name, n_bytes]
    n_params = sum(s[1] for s in mix.values())
    weight_bytes = sum(s[2] for s in mix.values())
    ordered = sorted(mix.items(), key=lambda item: (-item[1][2], item[0]))
    window = meta.get(f"{arch}.attention.sliding_window")
    experts, experts_used = _int(meta.get(f"{arch}.expert_count")), _int(meta.get(f"{arch}.expert_used_count"))
    decode_bytes, active, tied = per_token_use(header.tensors, experts, experts_used)
    return ModelInfo(
        path=str(path), name=str(meta.get("general.name") or Path(path).stem), architecture=arch,
        file_type=_file_type_name(meta.get("general.file_type")), n_params=n_params, weight_bytes=weight_bytes,
        bits_per_weight=weight_bytes * 8 / n_params if n_params else 0.0,
        context_length=_int(meta.get(f"{arch}.context_length")), n_layer=n_layer, n_embd=n_embd,
        n_ff=_most(meta.get(f"{arch}.feed_forward_length")),
        n_head=n_head, n_head_kv=max(kv_heads, default=0), key_length=key_length, value_length=value_length,
        sliding_window=_int(window) or None, vocab_size=vocab or _int(meta.get(f"{arch}.vocab_size")),
        kv_elements_per_token=sum(kv_heads) * (key_length + value_length), file_size=header.file_size,
        expert_count=experts, expert_used_count=experts_used, tied_output=tied, decode_weight_bytes=decode_bytes,
        active_params=active,
        tensor_mix={name: TensorTypeStats(*stats[:4]) for name, stats in ordered},
    )


def info_cache() -> FileCache:
    return FileCache("model_info", max_bytes=MAX_CACHE_BYTES)


def model_info(path: Path, *, use_cache: bool = True) -> ModelInfo:
    """Inspect a GGUF file; the header is parsed once per file version, then read from the cache.

    Raises HeaderError (a ValueError) or OSError for files that aren't whole GGUF files.
    """
    path = Path(path).resolve()
    cache = info_cache()
    if use_cache:
        cached = cache.get(path)
        if isinstance(cached, dict) and cached.get("schema") == SCHEMA:
            try:
                return ModelInfo.from_json(cached.get("info"))
            except ValueError:
                pass  # edited or damaged: built again below, and the entry rewritten
    info = info_from_header(path, read_header(path))
    cache.put(path, {"schema": SCHEMA, "info": asdict(info)})
    return info


def model_infos(paths: list[Path]) -> dict[Path, ModelInfo | Exception]:
    """`model_info` for many files with one read and one write of the cache; each file's value is
    its ModelInfo, or the HeaderError or OSError that says why it has none."""
    cache, found, fresh = info_cache(), {}, {}
    cached = cache.get_many(paths)
    for path in paths:
        value = cached.get(path)
        if isinstance(value, dict) and value.get("schema") == SCHEMA:
            try:
                found[path] = ModelInfo.from_json(value.get("info"))
                continue
            except ValueError:
                pass  # edited or damaged: built again from the header
        try:
            found[path] = info_from_header(Path(path).resolve(), read_header(path))
        except (ValueError, OSError) as exc:
            found[path] = exc
            continue
        fresh[path] = {"schema": SCHEMA, "info": asdict(found[path])}
    if fresh:
        cache.put_many(fresh)
    return found


def kv_bytes_per_token(info: ModelInfo, kv_type: str = "f16") -> int:
    """Bytes one token's K and V take in the cache, all layers, for a KV type (f16, q8_0, q4_0)."""
    if kv_type not in KV_GGML_TYPES:
        raise ConfigError(f"kv_type must be one of {', '.join(KV_GGML_TYPES)}, got {kv_type!r}")
    block, type_size = GGML_QUANT_SIZES[KV_GGML_TYPES[kv_type]]
    return info.kv_elements_per_token * type_size // block
