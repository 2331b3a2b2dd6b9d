"""Leftover temp files and the size cap on saved states.

Writes are atomic (chatapp.private.atomic_write): a kill at any moment leaves either the old
file or the new one, plus at most a temp file, which `clean_temp_files` removes once its
writer is gone.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from chatapp.private import TEMP_SUFFIX, atomic_write, fsync_dir, temp_path

__all__ = ["TEMP_SUFFIX", "atomic_write", "clean_temp_files", "evict_lru", "fsync_dir", "list_states", "temp_path",
           "touch"]

STALE_AFTER_S = 3600


def _writer_alive(name: str) -> bool:
    parts = name.split(".")
    try:
        pid = int(parts[-3])
    except (IndexError, ValueError):
        return False
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # exists but isn't ours
        return True
    return True


def clean_temp_files(directory: Path) -> int:
    """Remove temp files left by writers that died (or that are over an hour old)."""
    removed = 0
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return 0
    now = time.time()
    for entry in entries:
        if not (entry.name.startswith(".") and entry.name.endswith(TEMP_SUFFIX)):
            continue
        try:
            stale = now - entry.stat().st_mtime > STALE_AFTER_S
            if stale or not _writer_alive(entry.name):
                os.unlink(entry.path)
                removed += 1
        except OSError:
            continue
    return removed


@dataclass(frozen=True)
class StoredState:
    path: Path
    size: int
    used: float
    """mtime: set when the state is written or restored, so it orders by last use."""


def list_states(directory: Path, suffix: str) -> list[StoredState]:
    found = []
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return []
    for entry in entries:
        if entry.name.endswith(suffix) and not entry.name.startswith("."):
            try:
                stat = entry.stat()
            except OSError:
                continue
            found.append(StoredState(Path(entry.path), stat.st_size, stat.st_mtime))
    return found


def evict_lru(directory: Path, suffix: str, cap_bytes: int,
              owner: Callable[[Path], str] | None = None) -> list[Path]:
    """Delete least recently used states until their total is within the cap. With `owner`
    (a state's session), a session's other states go before any session's last one: no
    session loses its only (most recently used) state while another keeps more than one."""
    states = sorted(list_states(directory, suffix), key=lambda s: s.used)
    total = sum(s.size for s in states)
    newest: dict[str, StoredState] = {}
    for state in states if owner else ():
        newest[owner(state.path)] = state  # sorted oldest first: the last one seen is the newest
    extra = [s for s in states if owner and newest.get(owner(s.path)) is not s]
    evicted = []
    for state in [*extra, *(s for s in states if s not in extra)]:
        if total <= cap_bytes:
            break
        with contextlib.suppress(FileNotFoundError):
            state.path.unlink()
        total -= state.size
        evicted.append(state.path)
    return evicted


def touch(path: Path) -> None:
    with contextlib.suppress(OSError):
        os.utime(path)
