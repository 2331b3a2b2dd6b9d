"""Which GGUF file to load: resolution of a model spec, validation, and the local inventory.

A spec is a catalog name, a path to a GGUF file, or the file name of a GGUF file in one of
paths.model_search_dirs(). Resolution order: the explicit spec, then $CHATAPP_MODEL, then
settings.model, then the catalog's default.
"""

from __future__ import annotations

import errno
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from chatapp import paths
from chatapp.config import Settings
from chatapp.engine.models.catalog import Catalog, CatalogEntry, load_catalog
from chatapp.engine.filecache import file_sha256
from chatapp.engine.models.gguf_header import (
    GGUFHeader, HeaderError, NotGGUFError, UnsupportedVersionError, read_header)
from chatapp.engine.models.pull import Progress, find_local, pull
from chatapp.engine.models.template import check_templates
from chatapp.errors import ModelError

__all__ = ["ModelNotDownloadedError", "LocalModel", "check_gguf", "file_sha256", "local_models", "resolve_model",
           "model_spec"]

ENV_VAR = "CHATAPP_MODEL"


class ModelNotDownloadedError(ModelError):
    def __init__(self, name: str):
        super().__init__(f"model {name!r} is not downloaded; run: chatapp models pull {name}")
        self.name = name


FILE_KINDS = {stat.S_IFDIR: "a directory", stat.S_IFIFO: "a named pipe", stat.S_IFSOCK: "a socket",
              stat.S_IFCHR: "a character device", stat.S_IFBLK: "a block device"}


def file_problem(path: Path) -> str | None:
    """Why `path` can't be a model file, from its metadata alone (nothing is opened: reading
    a named pipe would wait forever), in one line; None for a regular file."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return f"model file not found: {path}"
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return f"{path} is a symlink loop (too many levels of symbolic links)"
        return f"cannot read {path}: {exc.strerror or exc}"
    if stat.S_ISREG(mode):
        return None
    return f"{path} is {FILE_KINDS.get(stat.S_IFMT(mode), 'not a regular file')}, not a GGUF file"


def check_gguf(path: Path) -> GGUFHeader:
    """Read the header cheaply and check the file holds all its declared tensor data."""
    problem = file_problem(path)
    if problem is not None:
        raise ModelError(problem)
    try:
        header = read_header(path)
    except NotGGUFError as exc:
        raise ModelError(f"{path}: {exc}") from None
    except UnsupportedVersionError as exc:
        raise ModelError(f"{path}: {exc}") from None
    except HeaderError as exc:
        raise ModelError(f"{path}: truncated or corrupt GGUF ({exc})") from None
    except OSError as exc:
        raise ModelError(f"cannot read {path}: {exc.strerror or exc}") from None
    check_templates(header.metadata)  # llama-cpp-python compiles them on load, and could hang there
    return header


def model_spec(spec: str | None = None, settings: Settings | None = None, catalog: Catalog | None = None) -> str:
    """The spec that wins: explicit, then $CHATAPP_MODEL, then settings.model, then the default."""
    return (spec or os.environ.get(ENV_VAR) or (settings.model if settings else None)
            or (catalog or load_catalog()).default)


def _looks_like_path(spec: str) -> bool:
    return os.sep in spec or "/" in spec or spec.endswith(".gguf") or spec.startswith("~")


def _in_search_dirs(spec: str) -> Path | None:
    for directory in paths.model_search_dirs():
        for candidate in (directory / spec, directory / f"{spec}.gguf"):
            if candidate.is_file():
                return candidate
    return None


def resolve_model(spec: str | None = None, settings: Settings | None = None, *, progress: Progress | None = None,
                  pull_default: bool = True, catalog: Catalog | None = None) -> Path:
    """The GGUF file to load, checked to be a whole GGUF file. Raises ModelError.

    A catalog model that is missing locally is pulled only if it is the catalog's default
    (and `pull_default` is on); others raise ModelNotDownloadedError.
    """
    catalog = catalog or load_catalog()
    if spec is not None and not spec.strip():
        raise ModelError("the model name is empty; leave --model out to use the configured or default model")
    choice = model_spec(spec, settings, catalog)
    entry = catalog.find(choice)
    if entry is not None:
        path = find_local(entry)
        if path is None:
            if entry.name != catalog.default or not pull_default:
                raise ModelNotDownloadedError(entry.name)
            path = pull(entry.name, progress=progress, catalog=catalog)
    else:
        path = Path(choice).expanduser()
        if not path.exists() and os.sep not in choice and "/" not in choice:
            path = _in_search_dirs(choice) or path
        if not os.path.lexists(path):
            if _looks_like_path(choice):
                raise ModelError(f"model file not found: {path}")
            raise ModelError(f"unknown model {choice!r}; known models: {', '.join(catalog.names())} "
                             "(or give a path to a .gguf file)")
    check_gguf(path)
    return path.resolve()


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
