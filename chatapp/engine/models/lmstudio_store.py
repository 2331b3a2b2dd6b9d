"""Models in LM Studio's folder, found read-only and named `lmstudio:PUBLISHER/REPO[/FILE]`.

LM Studio keeps models/PUBLISHER/REPO/*.gguf under its home: the folder named in
~/.lmstudio-home-pointer, else ~/.lmstudio, else the legacy ~/.cache/lm-studio.
"""

from __future__ import annotations

from pathlib import Path

from chatapp.paths import read_capped
from chatapp.engine.models.sources import NAME_PART, FoundModel, GgufGroup, found_group, group_gguf_files
from chatapp.errors import ModelError

POINTER = ".lmstudio-home-pointer"
MAX_POINTER_BYTES = 4096


def home_dir() -> Path:
    pointer = Path.home() / POINTER
    try:  # a named pipe or a device there is refused (it would never end or never answer)
        named = read_capped(pointer, MAX_POINTER_BYTES).decode("utf-8").strip()
        if named and Path(named).expanduser().is_dir():
            return Path(named).expanduser()
    except (OSError, UnicodeDecodeError, RuntimeError):  # RuntimeError: it names ~USER of no user here
        pass
    if (Path.home() / ".lmstudio").is_dir():
        return Path.home() / ".lmstudio"
    return Path.home() / ".cache" / "lm-studio"


def _folders(folder: Path) -> list[Path]:
    try:
        return sorted(entry for entry in folder.iterdir() if NAME_PART.match(entry.name) and entry.is_dir())
    except OSError:
        return []


def _groups(repo: Path) -> list[GgufGroup]:
    try:
        return group_gguf_files(entry for entry in repo.iterdir() if entry.is_file())
    except OSError:
        return []


def models(home: Path | None = None) -> list[FoundModel]:
    """Every GGUF chat model under the home's models folder; a repo with one model is named
    without its file."""
    root = (home or home_dir()) / "models"
    found = []
    for publisher in _folders(root):
        for repo in _folders(publisher):
            groups = _groups(repo)
            for group in groups:
                name = f"lmstudio:{publisher.name}/{repo.name}"
                if len(groups) > 1:
                    name += f"/{group.first.name}"
                found.append(found_group(name, "lmstudio", group))
    return found


def resolve(spec: str) -> tuple[Path, str]:
    """The first file of the model an lmstudio: name points to, and its name as listed."""
    parts = spec.removeprefix("lmstudio:").split("/")
    if len(parts) not in (2, 3) or not all(NAME_PART.match(part) for part in parts):
        raise ModelError(f"{spec!r} is not an LM Studio model name; use lmstudio:PUBLISHER/REPO[/FILE]")
    repo = home_dir() / "models" / parts[0] / parts[1]
    groups = _groups(repo)
    if len(parts) == 3:
        groups = [g for g in groups if g.first.name == parts[2] or g.first.name == f"{parts[2]}.gguf"]
    if not groups:
        raise ModelError(f"{spec} is not in LM Studio's models folder ({repo.parent.parent})")
    if len(groups) > 1:
        names = ", ".join(g.first.name for g in groups)
        raise ModelError(f"{spec} holds {len(groups)} models ({names}); name one: {spec}/FILE")
    if groups[0].problem:
        raise ModelError(f"{spec}: {groups[0].problem}")
    name = f"lmstudio:{parts[0]}/{parts[1]}"
    if len(_groups(repo)) > 1:  # named with its file, as `models` lists it
        name += f"/{groups[0].first.name}"
    return groups[0].first, name
