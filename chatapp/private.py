"""chatapp's files belong to its user alone: folders 0700, files 0600, whatever the umask.

A saved session is the user's conversation, and its KV state encodes the same text, so with
the usual umask 022 every other user of the machine could read both. Everything chatapp
creates under its data and cache folders goes through the helpers here, which ask for the
private mode when they create (never a window where the file is open to others) and then set
it again, since a umask can also strip owner bits.

An install made before this existed has 0755 folders and 0644 files. `tighten_install()`,
run at the start of each CLI command, fixes that. It looks at the data and cache folders,
what they hold and what their folders hold (a few dozen stats), and walks a tree only when
one of them is open to others; the KV states inside states/ are reached only by that walk.

Files are written whole (`atomic_write`): to a private temp file in the target's folder,
fsynced, then os.replace()d over the target, and the folder fsynced. A kill at any moment
leaves the old file or the new one, plus at most a temp file.

Nothing here runs at import time.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from chatapp import paths

PRIVATE_DIR = 0o700
PRIVATE_FILE = 0o600
OTHERS = 0o077
"""Group and other permission bits: what "private" clears."""

_NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def current_uid() -> int:
    """The user chatapp runs as: whose files it opens."""
    return os.geteuid()


def foreign_owner(st: os.stat_result) -> int | None:
    """The owner's uid when a file belongs to another user, else None."""
    return st.st_uid if st.st_uid != current_uid() else None


def owner_problem(path: Path) -> str | None:
    """Why chatapp won't open `path` (it belongs to another user), or None. A missing file is no problem."""
    try:
        owner = foreign_owner(os.stat(path))
    except FileNotFoundError:
        return None
    return None if owner is None else f"it belongs to another user (uid {owner})"


def make_private_dir(path: Path) -> Path:
    """Create `path` and its missing parents 0700. Existing folders are left as they are."""
    path = Path(path)
    missing = []
    probe = path
    while not probe.is_dir() and probe != probe.parent:
        missing.append(probe)
        probe = probe.parent
    for folder in reversed(missing):
        try:
            os.mkdir(folder, PRIVATE_DIR)
        except FileExistsError:
            if folder.is_dir():  # made by someone else just now
                continue
            raise
        os.chmod(folder, PRIVATE_DIR)
    return path


def create_private(path: Path) -> int:
    """A new file opened for writing, 0600: fails if anything, a symlink included, is at `path`."""
    fd = os.open(path, _NEW_FILE, PRIVATE_FILE)
    try:
        os.fchmod(fd, PRIVATE_FILE)
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_private(path: Path) -> BinaryIO:
    """`open(path, "xb")`, but the file is 0600 from the start and a symlink there is refused."""
    return os.fdopen(create_private(path), "wb")


def precreate_private(path: Path) -> None:
    """Make an empty 0600 file unless one exists, for libraries that create files with their
    own mode: SQLite makes a database 0644 (less the umask) and gives its -wal and -shm files
    the database's mode, so a database that starts 0600 keeps all three private."""
    try:
        os.close(create_private(path))
    except FileExistsError:
        pass


# --- tightening an existing install ------------------------------------------------------------
@dataclass
class Tightened:
    files: int = 0
    folders: int = 0
    roots: list[Path] = field(default_factory=list)

    def notice(self) -> str | None:
        if not self.files and not self.folders:
            return None
        parts = [f"{n} {word}{'' if n == 1 else 's'}"
                 for n, word in ((self.files, "file"), (self.folders, "folder")) if n]
        where = ", ".join(str(root) for root in self.roots)
        return f"tightened permissions on {' and '.join(parts)} in {where} (other users could read them)"


def _loose(entry: os.DirEntry | Path) -> bool:
    try:
        st = entry.stat(follow_symlinks=False) if isinstance(entry, os.DirEntry) else os.stat(entry)
    except OSError:
        return False
    return bool(st.st_mode & OTHERS) and not stat.S_ISLNK(st.st_mode) and foreign_owner(st) is None


def _entries(folder: Path | str) -> list[os.DirEntry]:
    try:
        with os.scandir(folder) as found:
            return list(found)
    except OSError:
        return []


def _looks_loose(root: Path, depth: int = 3) -> bool:
    """The root and what lies up to `depth` folders below it (sessions.db, sessions/states/*.kvstate,
    models, caches): a few hundred stats at most, so a start on a private install stays cheap, and
    one loose state file among private ones is still found."""
    if _loose(root):
        return True
    if depth <= 0:
        return False
    for entry in _entries(root):
        if entry.is_dir(follow_symlinks=False):
            if _looks_loose(Path(entry.path), depth - 1):
                return True
        elif _loose(entry):
            return True
    return False


def private_roots() -> list[Path]:
    """The folders whose every file is chatapp's and private: data (sessions, models) and cache."""
    return [paths.data_dir(), paths.cache_dir()]


def _tighten_fd(fd: int, st: os.stat_result) -> bool:
    if foreign_owner(st) is not None or not st.st_mode & OTHERS:
        return False
    os.fchmod(fd, stat.S_IMODE(st.st_mode) & ~OTHERS)  # keeps the owner's bits, x on programs included
    return True


def tighten_tree(root: Path, result: Tightened) -> None:
    """Clear group and other bits on every folder and regular file under `root` that is ours.

    Symlinks are never followed, and files are changed through a descriptor opened relative
    to their folder's descriptor, so a link swapped in during the walk changes nothing else."""
    before = (result.files, result.folders)
    for _dirpath, _dirnames, filenames, dirfd in os.fwalk(root, follow_symlinks=False):
        with contextlib.suppress(OSError):
            if _tighten_fd(dirfd, os.fstat(dirfd)):
                result.folders += 1
        for name in filenames:
            try:
                if not stat.S_ISREG(os.stat(name, dir_fd=dirfd, follow_symlinks=False).st_mode):
                    continue
                fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dirfd)
            except OSError:
                continue
            try:
                st = os.fstat(fd)
                if stat.S_ISREG(st.st_mode) and _tighten_fd(fd, st):
                    result.files += 1
            except OSError:
                pass
            finally:
                os.close(fd)
    if (result.files, result.folders) != before:
        result.roots.append(root)


def tighten_install(roots: list[Path] | None = None) -> Tightened:
    """Make an older install private. Cheap when it already is: a few stats, no walk."""
    result = Tightened()
    for root in roots or private_roots():
        if _looks_loose(root):
            tighten_tree(Path(os.path.realpath(root)), result)
    return result


TEMP_SUFFIX = ".tmp"


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
