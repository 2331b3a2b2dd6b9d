"""Copies of a GGUF file with other chat templates, built with the `gguf` package's reader and
writer, for tests that need a model whose template is hostile. Built in tmp_path, never kept."""

from __future__ import annotations

import functools
from pathlib import Path

import gguf


@functools.cache
def _read(source: Path, mtime_ns: int) -> tuple[gguf.GGUFReader, str, list]:
    """The source's reader, architecture and key/values to copy, read once per file version:
    the reader's parse of the default model's 49k-token vocabulary is 2.0 of a copy's 2.4 s, and
    the family tests copy it once for each of llama.cpp's 70 templates."""
    reader = gguf.GGUFReader(source, "r")
    arch = reader.get_field(gguf.Keys.General.ARCHITECTURE).contents()
    kept = []
    for field in reader.fields.values():
        # the writer adds the architecture and GGUF.* itself; the template is replaced
        if field.name in (gguf.Keys.General.ARCHITECTURE, gguf.Keys.Tokenizer.CHAT_TEMPLATE) \
                or field.name.startswith("GGUF."):
            continue
        value_type = field.types[0]
        sub_type = field.types[-1] if value_type == gguf.GGUFValueType.ARRAY else None
        kept.append((field.name, field.contents(), value_type, sub_type))
    return reader, arch, kept


def copies_with_templates(source: Path, templates: dict[Path, str | None]) -> dict[Path, str | None]:
    """For each target path, every key/value and tensor of `source` with tokenizer.chat_template
    replaced by that target's template (left out for None: a model without one)."""
    source = Path(source).resolve()
    reader, arch, kept = _read(source, source.stat().st_mtime_ns)
    for target, template in templates.items():
        writer = gguf.GGUFWriter(target, arch=arch, endianess=reader.endianess)
        for name, value, value_type, sub_type in kept:
            writer.add_key_value(name, value, value_type, sub_type=sub_type)
        if template is not None:
            writer.add_chat_template(template)
        for tensor in reader.tensors:
            writer.add_tensor_info(tensor.name, tensor.data.shape, tensor.data.dtype, tensor.data.nbytes,
                                   tensor.tensor_type)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_ti_data_to_file()
        for tensor in reader.tensors:
            writer.write_tensor_data(tensor.data, tensor_endianess=reader.endianess)
        writer.close()
    return templates


def write_absurd_header(target: Path, *, blocks: int = 10**9, heads: int = -4, name_chars: int = 10_000_000) -> Path:
    """SYNTHETIC: a small, whole GGUF file (its tensor data is all there) whose header claims the
    absurd: `blocks` blocks, `heads` attention heads and K/V heads, a name of `name_chars`
    characters. Written with the gguf package's writer, as a hostile file would be."""
    import numpy as np

    writer = gguf.GGUFWriter(target, "llama")
    writer.add_name("x" * name_chars)
    writer.add_uint32(gguf.Keys.LLM.BLOCK_COUNT.format(arch="llama"), blocks)
    writer.add_uint32(gguf.Keys.LLM.EMBEDDING_LENGTH.format(arch="llama"), 32)
    writer.add_int32(gguf.Keys.Attention.HEAD_COUNT.format(arch="llama"), heads)
    writer.add_int32(gguf.Keys.Attention.HEAD_COUNT_KV.format(arch="llama"), heads)
    writer.add_tensor("token_embd.weight", np.zeros((10, 32), dtype=np.float32))
    writer.add_tensor("blk.0.attn_q.weight", np.zeros((32, 32), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return target
