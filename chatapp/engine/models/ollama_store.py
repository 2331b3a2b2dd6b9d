"""Models in Ollama's store, found read-only and named `ollama:NAME[:TAG]`.

Ollama keeps each model as a manifest, manifests/HOST/NAMESPACE/MODEL/TAG, whose layers name
content-addressed blobs, blobs/sha256-HEX. The layer of media type
application/vnd.ollama.image.model is the GGUF llama.cpp opens, as it is, in place (after
ollama's server/manifest.go and its model path rules). The default registry and namespace
(registry.ollama.ai/library) are left out of names, as `ollama run` does.
"""

from __future__ import annotations

import errno
import os
import re
from pathlib import Path

from chatapp.paths import RefusedFile, open_regular, read_json_capped
from chatapp.engine.models.sources import NAME_PART, FoundModel
from chatapp.errors import ModelError

MODEL_LAYER = "application/vnd.ollama.image.model"
PROJECTOR_LAYER = "application/vnd.ollama.image.projector"
DEFAULT_HOST, DEFAULT_NAMESPACE, DEFAULT_TAG = "registry.ollama.ai", "library", "latest"
MAX_MANIFEST_BYTES = 1 << 20
"""A manifest is a few hundred bytes; anything past a MiB is not one (and is not read whole)."""
DIGEST = re.compile(r"^sha256:([0-9a-f]{64})$")
BLOB_NAME = re.compile(r"sha256-[0-9a-f]{64}")
FILE_TYPE = re.compile(r"[A-Za-z0-9_]{1,16}")
"""A quantization's name as Ollama's config records it (Q4_K_M, F16, IQ4_XS): shown in lists,
so no other text from the blob (it may be a link to any file) is."""


def store_dirs() -> list[Path]:
    """OLLAMA_MODELS, else ~/.ollama/models and the Linux service's store."""
    if os.environ.get("OLLAMA_MODELS"):
        return [Path(os.environ["OLLAMA_MODELS"]).expanduser()]
    return [Path.home() / ".ollama" / "models", Path("/usr/share/ollama/.ollama/models")]


def display_name(host: str, namespace: str, model: str, tag: str) -> str:
    if host == DEFAULT_HOST:
        base = model if namespace == DEFAULT_NAMESPACE else f"{namespace}/{model}"
    else:
        base = f"{host}/{namespace}/{model}"
    return f"ollama:{base}:{tag}"


def parse_name(spec: str) -> tuple[str, str, str, str]:
    """ollama:[[HOST/]NAMESPACE/]MODEL[:TAG] -> (host, namespace, model, tag)."""
    body = spec.removeprefix("ollama:")
    path, _, tag = body.rpartition(":") if ":" in body.rsplit("/", 1)[-1] else (body, "", "")
    parts = path.split("/")
    if len(parts) == 1:
        parts = [DEFAULT_HOST, DEFAULT_NAMESPACE, *parts]
    elif len(parts) == 2:
        parts = [DEFAULT_HOST, *parts]
    tag = tag or DEFAULT_TAG
    if len(parts) != 3 or not all(NAME_PART.match(part) for part in (*parts, tag)):
        raise ModelError(f"{spec!r} is not an Ollama model name; use ollama:NAME, ollama:NAME:TAG "
                         "or ollama:USER/NAME:TAG")
    return parts[0], parts[1], parts[2], tag


def _read_json(path: Path) -> tuple[dict | None, str | None]:
    try:
        value = read_json_capped(path, MAX_MANIFEST_BYTES)
    except RefusedFile as exc:
        if exc.errno == errno.EFBIG:
            return None, "the manifest is over 1 MiB: not an Ollama manifest"
        return None, f"cannot read {path.name}: {exc.strerror}"  # a named pipe, a device: never waited on
    except OSError as exc:
        return None, f"cannot read {path.name}: {exc.strerror or exc}"
    except ValueError:
        return None, "the manifest is not JSON"
    return (value, None) if isinstance(value, dict) else (None, "the manifest is not a JSON object")


def _blob(store: Path, layer: object) -> tuple[Path | None, int]:
    if not isinstance(layer, dict):
        return None, 0
    match = DIGEST.match(str(layer.get("digest", "")))
    size = layer.get("size")
    return (store / "blobs" / f"sha256-{match[1]}" if match else None), size if isinstance(size, int) else 0


def read_manifest(store: Path, manifest: Path, name: str) -> FoundModel:
    """One model from its manifest; what makes it unusable is its `problem`."""
    data, problem = _read_json(manifest)
    if data is None:
        return FoundModel(name, "ollama", None, problem=problem)
    layers = data.get("layers")
    layers = layers if isinstance(layers, list) else []
    by_type = {layer.get("mediaType"): layer for layer in layers if isinstance(layer, dict)}
    projector, _ = _blob(store, by_type.get(PROJECTOR_LAYER))
    blob, size = _blob(store, by_type.get(MODEL_LAYER))
    if blob is None:
        return FoundModel(name, "ollama", None, projector=projector,
                          problem="no GGUF layer (it is not a llama.cpp model, or the manifest is damaged)")
    try:
        with open_regular(blob) as file:  # a named pipe there is refused, never waited on
            magic = file.read(4)
        size = size or blob.stat().st_size
    except OSError as exc:
        return FoundModel(name, "ollama", None, problem=f"its model blob {blob.name} is missing or unreadable "
                                                        f"({exc.strerror or exc})")
    if magic != b"GGUF":
        return FoundModel(name, "ollama", None, problem=f"its model blob {blob.name} is not a GGUF file")
    return FoundModel(name, "ollama", blob, size, _file_type(store, data), (blob,), projector)


def projector_of_blob(blob: Path) -> Path | None:
    """The projector layer (a vision model's mmproj, which llama.cpp opens as it is) of the
    manifest whose model layer is `blob`, when `blob` lies in an Ollama store's blobs/ folder;
    None for any other file, or a model that reads text only."""
    if blob.parent.name != "blobs" or not BLOB_NAME.fullmatch(blob.name):
        return None
    found, _ = models([blob.parent.parent])
    for entry in found:
        if entry.path == blob and entry.projector is not None and entry.projector.is_file():
            return entry.projector
    return None


def _file_type(store: Path, manifest: dict) -> str | None:
    """The quantization Ollama's config blob records for the model (e.g. "Q4_K_M")."""
    config, _ = _blob(store, manifest.get("config"))
    if config is None:
        return None
    data, _ = _read_json(config)
    value = data.get("file_type") if data else None
    return value if isinstance(value, str) and FILE_TYPE.fullmatch(value) else None  # a quant's name, nothing else


def _entries(folder: Path) -> list[Path]:
    try:
        return sorted(entry for entry in folder.iterdir() if NAME_PART.match(entry.name))
    except OSError:
        return []


def models(stores: list[Path] | None = None) -> tuple[list[FoundModel], list[str]]:
    """Every model of every readable store, and one line per store that could not be read."""
    found, problems = [], []
    for store in stores if stores is not None else store_dirs():
        manifests = store / "manifests"
        if not manifests.is_dir():
            continue
        if not os.access(manifests, os.R_OK | os.X_OK):
            problems.append(f"Ollama store {store}: cannot read its manifests")
            continue
        for host in _entries(manifests):
            for namespace in _entries(host):
                for model in _entries(namespace):
                    for tag in _entries(model):
                        if tag.is_file():
                            name = display_name(host.name, namespace.name, model.name, tag.name)
                            found.append(read_manifest(store, tag, name))
    return found, problems


def resolve(spec: str) -> tuple[Path, str]:
    """The model blob an ollama: name points to, and the name as Ollama lists it (the default
    registry and namespace left out, the tag filled in); ModelError when it is not here."""
    found = find(spec)
    if found is not None:
        return found
    host, namespace, model, tag = parse_name(spec)
    where = ", ".join(str(store) for store in store_dirs())
    raise ModelError(f"{display_name(host, namespace, model, tag)} is not in Ollama's store ({where}); "
                     f"pull it with: ollama pull {display_name(host, namespace, model, tag).removeprefix('ollama:')}")


def find(spec: str) -> tuple[Path, str] | None:
    """`resolve`, but None when no store has a manifest of that name (a malformed name or an
    unusable model is still a ModelError)."""
    host, namespace, model, tag = parse_name(spec)
    for store in store_dirs():
        manifest = store / "manifests" / host / namespace / model / tag
        if manifest.is_file():
            entry = read_manifest(store, manifest, display_name(host, namespace, model, tag))
            if entry.path is None:
                raise ModelError(f"{entry.name}: {entry.problem}")
            return entry.path, entry.name
    return None
