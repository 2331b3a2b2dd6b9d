"""Shared by the privacy tests: what is not private under a folder, umask switching, and files
that belong to another user."""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Iterator
from pathlib import Path

OTHER_UID = 4242


def not_private(*roots: Path) -> list[str]:
    """Every folder that is not exactly 0700 and every file not exactly 0600 under the roots
    (the roots included), as 'mode path'. Symlinks are not followed."""
    found = []
    for root in roots:
        if not root.exists():
            continue
        entries = [root] + sorted(root.rglob("*"))
        for path in entries:
            st = path.lstat()
            mode = stat.S_IMODE(st.st_mode)
            if stat.S_ISDIR(st.st_mode) and mode != 0o700 or stat.S_ISREG(st.st_mode) and mode != 0o600:
                found.append(f"{mode:o} {path}")
    return found


def files_under(*roots: Path) -> list[Path]:
    return sorted(p for root in roots if root.exists() for p in root.rglob("*") if p.is_file())


@contextlib.contextmanager
def umask(mask: int) -> Iterator[None]:
    old = os.umask(mask)
    try:
        yield
    finally:
        os.umask(old)


def give_away(path: Path, monkeypatch) -> None:
    """Make `path` another user's. As root (here and in CI) it is chown'd to OTHER_UID.

    TEST SHIM, not root: a file can't be given away, so chatapp is made to believe it runs
    as another user from now on (chatapp.private.current_uid, its one notion of "me"); every
    file opened after this call looks foreign, so call it after opening what must still open."""
    if os.geteuid() == 0:
        os.chown(path, OTHER_UID, OTHER_UID)
        return
    from chatapp import private

    me = os.geteuid()
    monkeypatch.setattr(private, "current_uid", lambda: me + 1)
