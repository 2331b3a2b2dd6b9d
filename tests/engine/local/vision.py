"""A test projector and test images, made when asked: no vision model is on this machine.

The projector is a LLaVA-style `mlp` clip (one ViT block, 32-pixel images in 8-pixel patches, so
16 image tokens) with random weights, projecting into the text model's embedding size. libmtmd
loads it as it loads a real mmproj; its pictures mean nothing, which the tests never need.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from chatapp.engine.local.llama import LlamaRuntime
    from chatapp.engine.local.llama.mtmd import ImageCells, Projector

IMAGE_SIZE, PATCH_SIZE = 32, 8


def build_projector(path: Path, *, n_embd: int = 576, width: int = 64, ff: int = 128, layers: int = 1,
                    image_size: int = IMAGE_SIZE, patch_size: int = PATCH_SIZE) -> Path:
    """Write an mmproj GGUF with the keys and tensors libmtmd's clip loader asks of projector `mlp`."""
    import gguf

    rng = np.random.default_rng(0)
    writer = gguf.GGUFWriter(str(path), "clip")
    writer.add_bool("clip.has_vision_encoder", True)
    writer.add_bool("clip.has_llava_projector", True)
    writer.add_string("clip.projector_type", "mlp")
    for key, value in (("image_size", image_size), ("patch_size", patch_size), ("embedding_length", width),
                       ("feed_forward_length", ff), ("projection_dim", n_embd), ("block_count", layers),
                       ("attention.head_count", 4)):
        writer.add_uint32(f"clip.vision.{key}", value)
    writer.add_float32("clip.vision.attention.layer_norm_epsilon", 1e-5)
    writer.add_array("clip.vision.image_mean", [0.5, 0.5, 0.5])
    writer.add_array("clip.vision.image_std", [0.5, 0.5, 0.5])
    writer.add_bool("clip.use_gelu", True)

    def tensor(name: str, *shape: int, ones: bool = False) -> None:
        data = np.ones(shape, np.float32) if ones else (rng.standard_normal(shape) * 0.02).astype(np.float32)
        writer.add_tensor(name, data)

    tensor("v.patch_embd.weight", width, 3, patch_size, patch_size)
    tensor("v.class_embd", width)
    tensor("v.position_embd.weight", (image_size // patch_size) ** 2 + 1, width)
    tensor("v.pre_ln.weight", width, ones=True)
    tensor("v.pre_ln.bias", width)
    for i in range(layers):
        for name in ("attn_q", "attn_k", "attn_v", "attn_out"):
            tensor(f"v.blk.{i}.{name}.weight", width, width)
            tensor(f"v.blk.{i}.{name}.bias", width)
        for name in ("ln1", "ln2"):
            tensor(f"v.blk.{i}.{name}.weight", width, ones=True)
            tensor(f"v.blk.{i}.{name}.bias", width)
        tensor(f"v.blk.{i}.ffn_up.weight", ff, width)
        tensor(f"v.blk.{i}.ffn_up.bias", ff)
        tensor(f"v.blk.{i}.ffn_down.weight", width, ff)
        tensor(f"v.blk.{i}.ffn_down.bias", width)
    tensor("mm.0.weight", n_embd, width)
    tensor("mm.0.bias", n_embd)
    tensor("mm.2.weight", n_embd, n_embd)
    tensor("mm.2.bias", n_embd)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def png(pixels: np.ndarray) -> bytes:
    """An RGB PNG of an (h, w, 3) uint8 array, with zlib alone (Pillow is not installed here)."""
    height, width, _ = pixels.shape
    raw = b"".join(b"\0" + pixels[y].tobytes() for y in range(height))

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b"")


def picture(seed: int, height: int = 48, width: int = 40) -> bytes:
    return png(np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8))


# The prompt as parts, fed straight to a runtime: the libmtmd layer's tests drive a Projector with
# these, below the backend (whose own path is chatapp.engine.local.images).


def prompt_ids(runtime: LlamaRuntime, parts: Sequence[str | ImageCells]) -> list[int]:
    """The whole prompt as the runtime's token list will hold it: text tokenized, images as cells."""
    from chatapp.engine.local.llama.mtmd import ImageCells

    ids: list[int] = []
    for part in parts:
        ids += list(part.ids) if isinstance(part, ImageCells) else runtime.tokenize(part, special=True)
    return ids


def feed(projector: Projector, parts: Sequence[str | ImageCells]) -> int:
    """Bring the cache to exactly `parts`: keep the longest prefix already cached (never half an
    image: an image whose cells are not all kept is decoded again, from its kept embeddings),
    then evaluate the rest, so the next token can be sampled. Returns how many cells were kept."""
    from chatapp.engine.local.llama.mtmd import ImageCells

    rt = projector.runtime
    cached = rt.kv_tokens
    keep, pos = 0, 0
    for part in parts:
        ids = list(part.ids) if isinstance(part, ImageCells) else rt.tokenize(part, special=True)
        if isinstance(part, ImageCells):
            if cached[pos:pos + len(ids)] != ids:
                break
            keep = pos + len(ids)
        else:
            shared = 0
            for a, b in zip(cached[pos:], ids):
                if a != b:
                    break
                shared += 1
            keep = pos + shared
            if shared < len(ids):
                break
        pos += len(ids)
    if keep == pos and parts and isinstance(parts[-1], str) and not rt.logits_ready and keep:
        keep -= 1  # all cached, but a restored state has no logits: run the last text token again
    rt.keep_kv_prefix(keep)
    pos = 0
    for part in parts:
        ids = list(part.ids) if isinstance(part, ImageCells) else rt.tokenize(part, special=True)
        if pos + len(ids) > keep:
            if isinstance(part, ImageCells):
                projector.decode(part)
            else:
                rt.eval(ids[keep - pos:] if keep > pos else ids)
        pos += len(ids)
    return keep
