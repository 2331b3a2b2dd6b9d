"""What a llama-server says about its model (/props, /v1/models), as a ModelSummary.

The server reports its model's path, parameter count, tensor bytes, file type, context per
slot, build and chat template. It does not report threads, GPU layers, flash attention or
the KV cache's type, so those stay None ("not reported by the server").

When the server's model path is a readable GGUF file on this machine whose parameter count
and tensor bytes are the ones the server reports, it is the same model file, so its header
gives the layer count and the tensor-type mix (Quant panel) honestly. The KV cache's bytes
per token are not taken from it: they depend on the server's -ctk/-ctv, which it does not
report.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from chatapp.engine.backend import ModelSummary
from chatapp.engine.server import answers
from chatapp.format import one_line_text

SERVER_KIND = "llama-server"


def model_meta(models: answers.Models) -> answers.ModelMeta:
    """/v1/models' "meta" of the one model (empty while it loads, when the server has none)."""
    first = models.data[0].meta if models.data else None
    return first or answers.ModelMeta()


def template_sha256(props: answers.Props) -> str:
    return hashlib.sha256(props.chat_template.encode("utf-8")).hexdigest()


def _positive(value: int | None) -> int | None:
    return value if value else None


def _same_local_file(path: str, n_params: int | None, size: int | None):
    """The GGUF header of the server's model file, when this machine can read that very file."""
    from chatapp.engine.models.quant import model_info  # gguf and numpy, only when there is a file

    file = Path(path)
    if n_params is None or size is None or not file.is_file():
        return None
    try:
        info = model_info(file)
    except (OSError, ValueError):
        return None
    return info if (info.n_params, info.weight_bytes) == (n_params, size) else None


def _display_name(path: str) -> str:
    """The catalog name when the server runs a catalog model's file, else the file name."""
    from chatapp.engine.models.catalog import load_catalog

    name = Path(path).name
    entry = next((e for e in load_catalog().entries if e.file == name), None)
    return entry.name if entry else name


def summarize(url: str, props: answers.Props, models: answers.Models) -> ModelSummary:
    """Names the server chose (its path, build, quant) are shown escaped: they are its words."""
    path = props.model_path
    meta = model_meta(models)
    n_params, size = _positive(meta.n_params), _positive(meta.size)
    info = _same_local_file(path, n_params, size)
    quant = props.model_ftype or meta.ftype or (info.file_type if info else None)
    return ModelSummary(
        name=one_line_text(_display_name(path)), path=one_line_text(path), kind=SERVER_KIND, backend=SERVER_KIND,
        location=f"{SERVER_KIND} {url}", build=one_line_text(props.build_info or "unknown"),
        n_ctx=props.default_generation_settings.n_ctx, quant=one_line_text(quant) if quant else None,
        n_layer=info.n_layer if info else None, n_params=n_params, size_bytes=size,
        local_file=str(Path(path).resolve()) if info else None, server=url,
    )
