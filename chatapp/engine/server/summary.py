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
from chatapp.errors import ServerError

SERVER_KIND = "llama-server"


def model_meta(models: dict) -> dict:
    """/v1/models' "meta" of the one model (None while loading: then empty)."""
    data = models.get("data") if isinstance(models, dict) else None
    first = data[0] if isinstance(data, list) and data and isinstance(data[0], dict) else {}
    meta = first.get("meta")
    return meta if isinstance(meta, dict) else {}


def slot_n_ctx(props: dict) -> int:
    settings = props.get("default_generation_settings")
    n_ctx = settings.get("n_ctx") if isinstance(settings, dict) else None
    if not isinstance(n_ctx, int) or n_ctx <= 0:
        raise ServerError("the server's /props has no context size: is it a llama-server?")
    return n_ctx


def template_sha256(props: dict) -> str:
    return hashlib.sha256(str(props.get("chat_template") or "").encode("utf-8")).hexdigest()


def _int(value) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


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


def summarize(url: str, props: dict, models: dict) -> ModelSummary:
    path = props.get("model_path")
    if not isinstance(path, str) or not path:
        raise ServerError(f"{url}/props names no model: is it a llama-server?")
    meta = model_meta(models)
    n_params, size = _int(meta.get("n_params")), _int(meta.get("size"))
    info = _same_local_file(path, n_params, size)
    quant = props.get("model_ftype") or meta.get("ftype") or (info.file_type if info else None)
    return ModelSummary(
        name=_display_name(path), path=path, kind=SERVER_KIND, backend=SERVER_KIND,
        location=f"{SERVER_KIND} {url}", build=str(props.get("build_info") or "unknown"), n_ctx=slot_n_ctx(props),
        quant=str(quant) if quant else None, n_layer=info.n_layer if info else None, n_params=n_params,
        size_bytes=size, local_file=str(Path(path).resolve()) if info else None, server=url,
    )
