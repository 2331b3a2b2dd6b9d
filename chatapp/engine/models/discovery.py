"""Every GGUF chat model on this machine, from every store, and the store names --model takes.

The stores: chatapp's catalog and its own models folders (chatapp.engine.models.resolve), the
Hugging Face hub cache and llama.cpp's flat cache (hub_cache), Ollama (ollama_store) and LM
Studio (lmstudio_store). Each is read-only: nothing is moved, copied, linked or changed. A
store that cannot be read, or a model in it that cannot be used, is one line in `problems`;
the rest is still listed. Finding reads folder entries and manifests only; headers (for
parameter counts) are read when a listing asks, and cached per file version.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from chatapp import paths
from chatapp.engine.models import hub_cache, lmstudio_store, ollama_store
from chatapp.engine.models.catalog import Catalog, CatalogEntry, load_catalog
from chatapp.engine.models.pull import find_local
from chatapp.engine.models.sources import PREFIXES, FoundModel, quant_of, total_size

RESOLVERS = {"huggingface": hub_cache.resolve, "ollama": ollama_store.resolve, "lmstudio": lmstudio_store.resolve}


@dataclass
class Discovery:
    models: list[FoundModel] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def store_source(spec: str) -> str | None:
    """The store a name belongs to by its prefix (hf:, ollama:, lmstudio:), or None."""
    return next((source for source, prefix in PREFIXES.items() if spec.startswith(prefix)), None)


def resolve_store_name(spec: str) -> tuple[Path, str] | None:
    """The file a store name points to and the name as the store lists it (ModelError when it
    points nowhere); None for a spec that is not a store name."""
    source = store_source(spec)
    return None if source is None else RESOLVERS[source](spec)


@dataclass(frozen=True)
class LocalModel:
    name: str
    """The catalog name, or the file name for a GGUF file the catalog doesn't know."""
    entry: CatalogEntry | None
    path: Path | None
    """None when a catalog model isn't downloaded."""


def local_models(catalog: Catalog | None = None) -> list[LocalModel]:
    """Every catalog model (present or not), then other .gguf files in the search directories."""
    catalog = catalog or load_catalog()
    found = [LocalModel(entry.name, entry, find_local(entry)) for entry in catalog.entries]
    known_files = {entry.file for entry in catalog.entries}
    for directory in paths.model_search_dirs():
        if not directory.is_dir():
            continue
        for path in sorted(directory.glob("*.gguf")):
            if path.name not in known_files and not path.name.startswith(".") and path.is_file():
                found.append(LocalModel(path.name, None, path))
    return found


def discover(catalog: Catalog | None = None) -> Discovery:
    catalog = catalog or load_catalog()
    found = Discovery()
    own: set[Path] = set()
    for model in local_models(catalog):
        entry = model.entry
        if model.path is not None:
            own.add(model.path.resolve())
        if entry is not None:
            found.models.append(FoundModel(entry.name, "catalog", model.path, entry.size, entry.quantization,
                                           (model.path,) if model.path else ()))
        elif model.path is not None:
            found.models.append(FoundModel(model.name, "local", model.path, total_size([model.path]),
                                           quant_of(model.path.name), (model.path,)))
    found.models += [m for m in hub_cache.flat_cache_models() if m.path is None or m.path.resolve() not in own]
    repos, problems = hub_cache.cached_repos()
    found.problems += problems
    for repo in repos:
        found.models += hub_cache.found(repo)
    ollama, problems = ollama_store.models()
    found.models += ollama
    found.problems += problems
    found.models += lmstudio_store.models()
    return found
