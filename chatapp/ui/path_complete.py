"""Completing the path of `/attach PATH` in the composer, as a shell does with Tab: the longest
common start of the names that match, and the names themselves when there are several."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

MAX_LISTED = 12


@dataclass(frozen=True)
class Completion:
    text: str
    """The path as completed (unchanged when nothing matches or nothing more is shared)."""
    candidates: tuple[str, ...] = ()
    """The names that match, when more than one does (at most MAX_LISTED, folders end in /)."""


def complete_path(partial: str, cwd: Path) -> Completion:
    """Complete `partial` (absolute, ~, or relative to `cwd`). Hidden names only when the typed
    name starts with a dot. Never raises: an unreadable folder completes nothing."""
    head, slash, name = partial.rpartition("/")
    folder_text = head + slash  # "" when the partial has no folder part
    if partial.startswith("~") and not slash:  # "~" or "~user": leave it to the user
        return Completion(partial)
    folder = Path(os.path.expanduser(folder_text)) if folder_text else Path(".")
    if not folder.is_absolute():
        folder = cwd / folder
    try:
        with os.scandir(folder) as found:
            entries = [e for e in found if e.name.startswith(name)
                       and (name.startswith(".") or not e.name.startswith("."))]
    except OSError:
        return Completion(partial)
    names = [e.name + ("/" if _is_dir(e) else "") for e in sorted(entries, key=lambda e: e.name)]
    if not names:
        return Completion(partial)
    shared = os.path.commonprefix(names)
    completed = folder_text + shared
    return Completion(completed, tuple(names[:MAX_LISTED]) if len(names) > 1 else ())


def _is_dir(entry: os.DirEntry) -> bool:
    try:
        return entry.is_dir()
    except OSError:
        return False
