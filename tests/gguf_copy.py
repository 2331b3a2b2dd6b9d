"""Copies of a GGUF file with other chat templates, built with the `gguf` package's reader and
writer, for tests that need a model whose template is hostile. Built in tmp_path, never kept."""

from __future__ import annotations

from pathlib import Path

import gguf


def copies_with_templates(source: Path, templates: dict[Path, str]) -> dict[Path, str]:
    """For each target path, every key/value and tensor of `source` with tokenizer.chat_template
    replaced by that target's template. The source is read once."""
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
    for target, template in templates.items():
        writer = gguf.GGUFWriter(target, arch=arch, endianess=reader.endianess)
        for name, value, value_type, sub_type in kept:
            writer.add_key_value(name, value, value_type, sub_type=sub_type)
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
