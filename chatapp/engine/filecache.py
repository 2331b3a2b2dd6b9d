"""Small JSON caches of facts about big files, keyed by the file's identity.

A file's identity is its resolved path, size and mtime_ns: touching or replacing the file
invalidates what was cached about it. Each cache is one JSON file under paths.cache_dir(),
holding one entry per path, written atomically. A damaged or unreadable cache file (not JSON,
nested too deep, over its cap, a named pipe) is treated as empty, and one that can't be
written is skipped: every cache problem means "not cached", and the next write replaces it.

Each cache reads at most its cap: FIGURES_BYTES for the machine's and the drafting's figures
(a few hundred bytes per model and setting), MAX_CACHE_BYTES for the caches that list every
model file (sha256s, model facts). A 32 MB draft policy file was restored whole: 1.3 GB of
memory and decoding 6x slower, for figures that fill a kilobyte.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
from pathlib import Path

from chatapp import paths
from chatapp.private import make_private_dir

FORMAT = 1
CHUNK = 1 << 20
MAX_CACHE_BYTES = 16 * paths.MiB
"""The most of a listing cache that is read: a listing of a thousand models caches well under
that; a bigger file (or a named pipe, or a device) is not one of chatapp's and counts as empty."""
FIGURES_BYTES = 256 * 1024
"""The most of any other cache that is read (the default): the drafting policy and batch checks,
decode threads and memory bandwidth keep under 1 KiB per model and setting, so this holds a
few hundred of each; a bigger file was not written by chatapp and counts as empty."""
_SHA256 = re.compile(r"[0-9a-f]{64}")


class FileCache:
    def __init__(self, name: str, directory: Path | None = None, *, max_bytes: int = FIGURES_BYTES):
        self.name = name
        self.directory = directory
        self.max_bytes = max_bytes

    @property
    def path(self) -> Path:
        return (self.directory or paths.cache_dir()) / f"{self.name}.json"

    @staticmethod
    def identity(path: Path) -> tuple[str, int, int]:
        resolved = Path(path).resolve()
        stat = resolved.stat()
        return str(resolved), stat.st_size, stat.st_mtime_ns

    def _load(self) -> dict:
        try:
            data = read_cache_json(self.path, self.max_bytes)
        except (OSError, ValueError):
            return {}
        if not isinstance(data, dict) or data.get("format") != FORMAT or not isinstance(data.get("entries"), dict):
            return {}
        return data["entries"]

    def get(self, path: Path):
        """The value cached for this file as it is now, or None."""
        key, size, mtime_ns = self.identity(path)
        entry = self._load().get(key)
        if isinstance(entry, dict) and entry.get("size") == size and entry.get("mtime_ns") == mtime_ns:
            return entry.get("value")
        return None

    def get_many(self, paths: list[Path]) -> dict[Path, object]:
        """`get` for many files with one read of the cache: what is cached for each file as it is
        now (files that cannot be looked at are left out)."""
        entries, found = self._load(), {}
        for path in paths:
            try:
                key, size, mtime_ns = self.identity(path)
            except OSError:
                continue
            entry = entries.get(key)
            if isinstance(entry, dict) and entry.get("size") == size and entry.get("mtime_ns") == mtime_ns:
                found[path] = entry.get("value")
        return found

    def put_many(self, values: dict[Path, object]) -> bool:
        """`put` for many files with one read and one write of the cache: a listing of a thousand
        models wrote the whole cache once per model before (45 s for 1,005 models here)."""
        entries = {k: v for k, v in self._load().items() if os.path.exists(k)}
        for path, value in values.items():
            try:
                key, size, mtime_ns = self.identity(path)
            except OSError:
                continue
            entries[key] = {"size": size, "mtime_ns": mtime_ns, "value": value}
        return write_json(self.path, {"format": FORMAT, "entries": entries})

    def put(self, path: Path, value) -> bool:
        """Remember `value` for this file. A cache is only a shortcut: when it can't be written (a
        folder where the file should be, a full disk, no permission) this returns False and the
        caller goes on with the value it has."""
        key, size, mtime_ns = self.identity(path)
        entries = {k: v for k, v in self._load().items() if os.path.exists(k)}
        entries[key] = {"size": size, "mtime_ns": mtime_ns, "value": value}
        return write_json(self.path, {"format": FORMAT, "entries": entries})


def read_cache_json(path: Path, limit: int = FIGURES_BYTES) -> object:
    """A cache file's JSON value. It is a file anyone may have edited or replaced: OSError when
    it is not a regular file of at most `limit` bytes or cannot be read, ValueError when it is
    not JSON (nested too deep included). Callers take either as "nothing cached"."""
    return paths.read_json_capped(path, limit)


def write_json(target: Path, data) -> bool:
    """Write JSON atomically and privately (0600): readers see the old file or the new one,
    never half of one. False when it could not be written: a cache that isn't is only slower."""
    try:
        make_private_dir(target.parent)
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")  # 0600
    except OSError:
        return False
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            json.dump(data, out, indent=1)
        os.replace(tmp, target)
    except OSError:
        Path(tmp).unlink(missing_ok=True)
        return False
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return True


def sha256_cache() -> FileCache:
    return FileCache("sha256", max_bytes=MAX_CACHE_BYTES)


def hash_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def file_sha256(path: Path) -> str:
    """The file's sha256 hex digest, hashed once per (resolved path, size, mtime_ns)."""
    cache = sha256_cache()
    cached = cache.get(path)
    if isinstance(cached, str) and _SHA256.fullmatch(cached):  # an edited value is hashed again
        return cached
    digest = hash_file(path)
    cache.put(path, digest)
    return digest
