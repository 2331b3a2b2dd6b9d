"""A session's images: each question names its images by sha256 (messages.images, the hashes
space-separated), and the session keeps each image's bytes once (the images table), so a resume,
an export and another machine have the pictures the model saw."""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Sequence

from chatapp.engine.images import image_sha

SHA256 = re.compile(r"[0-9a-f]{64}")

KeptImage = tuple[str, str, bytes]
"""(sha256, file name, bytes)."""


def images_column(images: Sequence[str]) -> str:
    return " ".join(images)


def read_images_column(raw: object) -> tuple[tuple[str, ...], str]:
    """A messages.images value: the hashes, and a notice ("" when all were read)."""
    if raw in (None, ""):
        return (), ""
    if not isinstance(raw, str):
        return (), "its image list is not text; its images are left out"
    shas = raw.split()
    kept = tuple(sha for sha in shas if SHA256.fullmatch(sha))
    if len(kept) == len(shas):
        return kept, ""
    return kept, f"{len(shas) - len(kept)} of its image hashes are not sha256s; left out"


def write_images(conn: sqlite3.Connection, session_id: int, images: Sequence[KeptImage]) -> None:
    """Keep these images for the session, each once; an image no message names any more goes."""
    stored = {sha for (sha,) in conn.execute("SELECT sha256 FROM images WHERE session_id = ?", (session_id,))}
    wanted = {sha for sha, _, _ in images}
    conn.executemany("DELETE FROM images WHERE session_id = ? AND sha256 = ?",
                     [(session_id, sha) for sha in stored - wanted])
    conn.executemany("INSERT INTO images (session_id, sha256, name, data) VALUES (?,?,?,?)",
                     [(session_id, sha, name, data) for sha, name, data in images if sha not in stored])


def read_images(conn: sqlite3.Connection, session_id: int) -> tuple[list[KeptImage], list[str]]:
    """The session's images, and a notice for each one dropped: bytes that do not match their hash."""
    kept, notices = [], []
    for sha, name, data in conn.execute("SELECT sha256, name, data FROM images WHERE session_id = ? ORDER BY rowid",
                                        (session_id,)):
        label = name if isinstance(name, str) else "an image"
        if not isinstance(data, bytes) or not isinstance(sha, str) or image_sha(data) != sha:
            notices.append(f"image dropped: {label}: its bytes do not match its sha256")
            continue
        kept.append((sha, label, data))
    return kept, notices
