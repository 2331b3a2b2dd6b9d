"""Which GGUF file to load: a model spec resolved to a checked file.

A spec is a catalog name, a store name (hf:ORG/REPO[:QUANT], ollama:NAME[:TAG],
lmstudio:PUBLISHER/REPO[/FILE]: chatapp.engine.models.discovery), a path to a GGUF file, or
the file name of a GGUF file in one of paths.model_search_dirs() or llama.cpp's flat cache, or
an Ollama name without its prefix (smollm2:135m, as `ollama run` takes it).
Resolution order: the explicit spec, then $CHATAPP_MODEL, then settings.model, then the
catalog's default.
"""

from __future__ import annotations

import errno
import os
import stat
from difflib import get_close_matches
from pathlib import Path

from chatapp import paths
from chatapp.config import Settings
from chatapp.engine.models.catalog import Catalog, load_catalog
from chatapp.engine.filecache import file_sha256
from chatapp.engine.models.discovery import resolve_store_name
from chatapp.engine.models.gguf_header import (
    GGUFHeader, HeaderError, NotGGUFError, UnsupportedVersionError, read_header)
from chatapp.engine.models import ollama_store
from chatapp.engine.models.hub_cache import llama_cache_dir
from chatapp.engine.models.pull import Progress, find_local, pull
from chatapp.engine.models.template import check_templates
from chatapp.errors import ModelError
from chatapp.presets import Preset, Presets

__all__ = ["ModelNotDownloadedError", "check_gguf", "file_sha256", "resolve_model", "resolve_named", "model_spec"]

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
    for directory in (*paths.model_search_dirs(), llama_cache_dir()):
        for candidate in (directory / spec, directory / f"{spec}.gguf"):
            if candidate.is_file():
                return candidate
    return None


def model_default_preset(presets: Presets, model: str | None, settings: Settings) -> Preset | None:
    """The preset that names the model this spec loads: by the spec, its file's name or stem, or
    the catalog name of its file, or (only when a preset names a sha256) the catalog's sha256 or the local file's."""
    if not presets.presets:
        return None
    catalog = load_catalog()
    spec = model_spec(model, settings, catalog)
    names = {spec, Path(spec).name, Path(spec).stem}
    names.update(entry.name for entry in catalog.entries if entry.file == Path(spec).name)  # a catalog file by path
    sha256 = None
    if presets.wants_sha256():
        entry = catalog.find(spec)
        if entry is not None:
            sha256 = entry.sha256
        elif Path(spec).expanduser().is_file():
            try:
                sha256 = file_sha256(Path(spec).expanduser())
            except OSError:
                sha256 = None
    return presets.for_model(names, sha256)


def resolve_model(spec: str | None = None, settings: Settings | None = None, *, progress: Progress | None = None,
                  pull_default: bool = True, catalog: Catalog | None = None) -> Path:
    """The GGUF file to load, checked to be a whole GGUF file. Raises ModelError.

    A catalog model that is missing locally is pulled only if it is the catalog's default
    (and `pull_default` is on); others raise ModelNotDownloadedError.
    """
    return resolve_named(spec, settings, progress=progress, pull_default=pull_default, catalog=catalog)[0]


def resolve_named(spec: str | None = None, settings: Settings | None = None, *, progress: Progress | None = None,
                  pull_default: bool = True, catalog: Catalog | None = None) -> tuple[Path, str | None]:
    """`resolve_model`, and the name to show for it: the store's name (ollama:NAME:TAG,
    hf:ORG/REPO:QUANT, lmstudio:PUB/REPO), the one a user can type back, for a model in another
    tool's store (also one named as `ollama run` takes it, e.g. smollm2:135m); None for a
    catalog model or a path, which are named as before (catalog name, file name)."""
    catalog = catalog or load_catalog()
    if spec is not None and not spec.strip():
        raise ModelError("the model name is empty; leave --model out to use the configured or default model")
    choice = model_spec(spec, settings, catalog)
    try:
        in_store = resolve_store_name(choice)
        entry = catalog.find(choice) if in_store is None else None
        if in_store is None and entry is None:
            in_store = _bare_ollama_name(choice)
        path = in_store[0] if in_store else (find_local(entry) if entry is not None else _path_of(choice, catalog))
    except OSError as exc:  # looking the name up as a file failed: one line, never a traceback
        raise ModelError(_lookup_problem(choice, exc)) from None
    if in_store is not None:
        check_gguf(in_store[0])
        # Absolute, not resolved: llama.cpp finds a split model's other parts beside the first
        # part's name, and in the hub cache that name is the snapshot's link, not the blob.
        return Path(os.path.abspath(in_store[0])), in_store[1]
    if entry is not None and path is None:
        if entry.name != catalog.default or not pull_default:
            raise ModelNotDownloadedError(entry.name)
        path = pull(entry.name, progress=progress, catalog=catalog)
    check_gguf(path)
    return path.resolve(), None


def _bare_ollama_name(choice: str) -> tuple[Path, str] | None:
    """An Ollama model named as `ollama run` takes it (smollm2:135m, someone/tiny:q4), when no
    file of that name is here: a file wins, as it did before store names."""
    if choice.startswith("~") or choice.lower().endswith(".gguf") or os.path.lexists(choice):
        return None
    if _in_search_dirs(choice) is not None:
        return None
    try:
        return ollama_store.find(f"ollama:{choice}")
    except ModelError:  # not an Ollama name, or no such model: the spec is looked up as before
        return None


def _did_you_mean(choice: str) -> str:
    """"; did you mean ollama:NAME:TAG?" for a name that an Ollama model's name starts with."""
    try:
        found, _ = ollama_store.models()
    except OSError:
        return ""
    bare = choice.removeprefix("ollama:")
    close = [m.name for m in found if m.path is not None
             and (m.name.startswith(f"ollama:{bare}:") or m.name.removeprefix("ollama:").split(":")[0] == bare)]
    return f"; did you mean {' or '.join(close[:3])}?" if close else ""


def _closest_name(choice: str, catalog: Catalog) -> str:
    """" (did you mean NAME?)" for a catalog name a typo away (difflib's ratio) or that it begins."""
    typed = choice.lower()
    close = [name for name in catalog.names() if name.startswith(typed)] if len(typed) >= 3 else []
    close = close if len(close) == 1 else get_close_matches(typed, catalog.names(), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _path_of(choice: str, catalog: Catalog) -> Path:
    """A spec that is no store or catalog name, as the file it names (ModelError when none)."""
    path = _expanded(choice)
    if not path.exists() and os.sep not in choice and "/" not in choice:
        path = _in_search_dirs(choice) or path
    if not os.path.lexists(path):
        if _looks_like_path(choice):
            raise ModelError(f"model file not found: {path}")
        raise ModelError(f"unknown model {choice!r}{_closest_name(choice, catalog)}; known models: "
                         f"{', '.join(catalog.names())} "
                         "(or give a path to a .gguf file, or a store name: hf:ORG/REPO[:QUANT], "
                         f"ollama:NAME[:TAG], lmstudio:PUBLISHER/REPO){_did_you_mean(choice)}")
    return path


SHOWN_NAME = 60
"""How much of a model name an error line quotes: a name that does not fit a file name is long."""


def _shown(choice: str) -> str:
    return repr(choice if len(choice) <= SHOWN_NAME else f"{choice[:SHOWN_NAME]}...")


def _lookup_problem(choice: str, exc: OSError) -> str:
    if exc.errno == errno.ENAMETOOLONG:
        return (f"the model name {_shown(choice)} ({len(choice):,} characters) is too long to be a file "
                "name; give a catalog name, a store name or a path to a .gguf file")
    return f"cannot look for the model {_shown(choice)}: {exc.strerror or exc}"


def _expanded(choice: str) -> Path:
    """The spec as a path, ~ and ~USER expanded; a ~USER of no user here is a ModelError."""
    try:
        return Path(choice).expanduser()
    except RuntimeError:  # Python's "Could not determine home directory."
        user = choice.split("/", 1)[0].split(os.sep, 1)[0].removeprefix("~")
        why = f"this machine has no user {_shown(user)}" if user else "no home folder is set"
        raise ModelError(f"model file not found: {_shown(choice)} ({why})") from None
