"""Atomic file writes, leftover temp files, and the size cap on saved states.

A write goes to a temp file in the target's folder, is fsynced, then os.replace()d over the
target, and the folder is fsynced. A kill at any moment leaves either the old file or the new
one, plus at most a temp file, which `clean_temp_files` removes once its writer is gone.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from chatapp.private import open_private

TEMP_SUFFIX = ".tmp"
STALE_AFTER_S = 3600


def fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:  # some platforms can't open a folder; the rename is still atomic
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def temp_path(target: Path) -> Path:
    """`.NAME.PID.RANDOM.tmp` next to the target: the PID tells cleanup whether its writer lives."""
    return target.with_name(f".{target.name}.{os.getpid()}.{secrets.token_hex(4)}{TEMP_SUFFIX}")


def atomic_write(target: Path, chunks: Iterable[bytes | memoryview]) -> int:
    """Replace `target` with the chunks' bytes, all or nothing. Returns the size written.

    The file is 0600 from its creation as a temp file on: it may be a conversation's KV state
    or a config holding an API key. A symlink at `target` is replaced, never followed."""
    tmp = temp_path(target)
    size = 0
    try:
        with open_private(tmp) as out:
            for chunk in chunks:
                out.write(chunk)
                size += len(chunk)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    fsync_dir(target.parent)
    return size


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


def evict_lru(directory: Path, suffix: str, cap_bytes: int) -> list[Path]:
    """Delete least recently used states until their total is within the cap."""
    states = sorted(list_states(directory, suffix), key=lambda s: s.used)
    total = sum(s.size for s in states)
    evicted = []
    for state in states:
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
