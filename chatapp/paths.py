"""Where chatapp keeps its files, and how it reads a file it did not write itself. Nothing
here touches the disk at import time."""

from __future__ import annotations

import errno
import json
import os
import stat
from pathlib import Path
from typing import BinaryIO

import platformdirs

APP_NAME = "chatapp"


def config_dir() -> Path:
    return platformdirs.user_config_path(APP_NAME)


def config_file() -> Path:
    return config_dir() / "config.toml"


def data_dir() -> Path:
    return platformdirs.user_data_path(APP_NAME)


def cache_dir() -> Path:
    return platformdirs.user_cache_path(APP_NAME)


def models_dir() -> Path:
    """Where `chatapp models pull` writes GGUF files."""
    return data_dir() / "models"


def sessions_dir() -> Path:
    return data_dir() / "sessions"


def user_themes_dir() -> Path:
    return config_dir() / "themes"


def checkout_root() -> Path | None:
    """The source checkout this package runs from, if any (an editable install)."""
    root = Path(__file__).resolve().parent.parent
    return root if (root / "pyproject.toml").is_file() else None


def checkout_models_dir() -> Path | None:
    root = checkout_root()
    return root / "models" if root else None


def model_search_dirs() -> list[Path]:
    dirs = [models_dir()]
    checkout = checkout_models_dir()
    if checkout is not None:
        dirs.append(checkout)
    return dirs


# --- reading a file chatapp did not write itself --------------------------------------------
# A config file, a pointer, a manifest, a cache or a state file may have been replaced by
# anything: a named pipe (reading it waits for a writer that never comes), a device
# (/dev/zero never ends), or a file far larger than any chatapp writes. Each is refused in
# one line before it is read, and what is read is capped.

KiB, MiB = 1 << 10, 1 << 20
FILE_KINDS = {stat.S_IFDIR: "a directory", stat.S_IFIFO: "a named pipe", stat.S_IFSOCK: "a socket",
              stat.S_IFCHR: "a character device", stat.S_IFBLK: "a block device", stat.S_IFLNK: "a symbolic link"}


class RefusedFile(OSError):
    """A file chatapp will not read: not a regular file, or over its cap. An OSError, so every
    caller that copes with an unreadable file copes with it; `strerror` says why in words."""


def size_text(n: int) -> str:
    """E.g. "512 bytes", "3.2 KiB", "9.4 MiB" (binary units, as the caps are set)."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", MiB), ("KiB", KiB)):
        if n >= scale:
            return f"{n / scale:,.1f} {unit}".replace(".0 ", " ")
    return f"{n:,} byte{'s' if n != 1 else ''}"


def _refuse_kind(path: Path | str, mode: int) -> None:
    if not stat.S_ISREG(mode):
        kind = FILE_KINDS.get(stat.S_IFMT(mode), "not a regular file")
        raise RefusedFile(errno.EINVAL, f"it is {kind}, not a regular file", str(path))


def check_regular(path: Path | str) -> None:
    """RefusedFile unless `path` is a regular file (or a link to one), from its metadata alone:
    for a reader that must open the file by name itself (a memory map), before it does."""
    _refuse_kind(path, os.stat(path).st_mode)


def open_regular(path: Path | str) -> BinaryIO:
    """`open(path, "rb")` for a regular file only, and never a wait: the type is checked before
    the file is opened (a device is not even opened), and again on what was opened, with
    O_NONBLOCK, so a named pipe swapped in meanwhile is refused instead of waited on. Raises
    RefusedFile (an OSError) for anything else; the other OSErrors as `open` raises them."""
    check_regular(path)
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        _refuse_kind(path, os.fstat(fd).st_mode)
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_capped(path: Path | str, limit: int) -> bytes:
    """The whole of a regular file of at most `limit` bytes. Raises RefusedFile for anything
    else (the cap is checked on the size first, and the read stops past it all the same: the
    file may grow meanwhile), and OSError when it cannot be read."""
    with open_regular(path) as file:
        size = os.fstat(file.fileno()).st_size
        data = file.read(limit + 1) if size <= limit else b""
    if size > limit or len(data) > limit:
        shown = size_text(size) if size > limit else f"over {size_text(limit)}"
        raise RefusedFile(errno.EFBIG, f"it is {shown}, more than the {size_text(limit)} chatapp reads of it",
                          str(path))
    return data


def read_json_capped(path: Path | str, limit: int) -> object:
    """The JSON value of a regular file of at most `limit` bytes. Raises OSError (RefusedFile
    included) when it cannot be read, ValueError when it is not JSON, not UTF-8, or nested too
    deep for the parser (a RecursionError is turned into a ValueError here, once for every caller)."""
    data = read_capped(path, limit)
    try:
        return json.loads(data)
    except RecursionError:
        raise ValueError("the JSON is nested too deep") from None
