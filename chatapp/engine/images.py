"""Images in a conversation, as the engine sees them: a user message names its images by content
hash, the template gets libmtmd's media marker where each one goes, and a backend that sees
images (a projector loaded, chatapp.engine.local.llama.mtmd) turns each marker into the image's
cells. What crosses the Backend boundary is `ImageFacts`; the bytes stay with `ImageShelf`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from chatapp.errors import AttachmentError

MEDIA_MARKER = "<__media__>"
"""libmtmd's default marker (`mtmd_default_marker()`, which the local backend checks it against):
where an image's cells go in the templated text, as llama-server and llama-mtmd-cli place it."""

MAX_IMAGE_BYTES = 32 * 1024 * 1024
"""The largest image file taken: far above any photo a projector reads (they scale to a few
hundred pixels a side), small enough that a wrong file is refused before it is decoded."""


@dataclass(frozen=True)
class ImageFacts:
    """An image as the model reads it: libmtmd's own figures for its chunk."""

    sha256: str
    name: str
    width: int
    height: int
    n_tokens: int
    """The image chunk's tokens (`mtmd_input_chunk_get_n_tokens`): the KV cells it fills."""
    nx: int = 0
    ny: int = 0

    def describe(self) -> str:
        """One line, e.g. "cat.png 640x480: 16 image tokens (4x4)"."""
        grid = f" ({self.nx}x{self.ny})" if self.nx and self.ny else ""
        return f"{self.name} {self.width}x{self.height}: {self.n_tokens} image tokens{grid}"


def image_sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def with_markers(content: str, images: Sequence[str]) -> str:
    """A user message's content as the template gets it: one marker (and a line break) per image,
    before the text, as a question about a picture reads."""
    return "".join(f"{MEDIA_MARKER}\n" for _ in images) + content


def check_size(name: str, size: int) -> None:
    if size > MAX_IMAGE_BYTES:
        raise AttachmentError(f"{name} is {size / 2**20:.0f} MiB; images over {MAX_IMAGE_BYTES // 2**20} MiB "
                              "are not taken")


SIGNATURES = (b"\x89PNG\r\n\x1a\n", b"\xff\xd8\xff", b"GIF87a", b"GIF89a", b"BM", b"P3", b"P6")
"""The formats libmtmd's image loader (stb_image) reads, by their first bytes."""


def read_image_files(paths: Sequence[Path]) -> list[tuple[str, bytes]]:
    """(file name, bytes) of each --image, in order; AttachmentError in one line for the first
    that is missing, a folder, too large or not an image."""
    read = []
    for path in paths:
        if not path.exists():
            raise AttachmentError(f"no image file at {path}")
        if not path.is_file():
            raise AttachmentError(f"{path} is not a file: --image takes one image file")
        check_size(path.name, path.stat().st_size)
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise AttachmentError(f"cannot read {path}: {exc.strerror or exc}") from None
        if not data.startswith(SIGNATURES):
            raise AttachmentError(f"{path.name} is not an image libmtmd reads (PNG, JPEG, BMP, GIF, PNM)")
        read.append((path.name, data))
    return read


def is_image_file(path: Path) -> bool:
    """Whether a file starts as an image libmtmd reads (the TUI's attach takes it as an image)."""
    try:
        with open(path, "rb") as f:
            return f.read(8).startswith(SIGNATURES)
    except OSError:
        return False


class ImageShelf:
    """The bytes of every image the conversation holds, by content hash: what a session keeps
    and what a backend is given again after a resume or a model switch."""

    def __init__(self) -> None:
        self._data: dict[str, bytes] = {}
        self._names: dict[str, str] = {}

    def put(self, data: bytes, name: str) -> str:
        check_size(name, len(data))
        sha = image_sha(data)
        self._data.setdefault(sha, data)
        self._names.setdefault(sha, name)
        return sha

    def get(self, sha: str) -> bytes:
        try:
            return self._data[sha]
        except KeyError:
            raise AttachmentError(f"the image {sha[:12]} is not in this conversation") from None

    def check_question(self, text: str, images: Sequence[str]) -> None:
        """A question's images must be on the shelf, and its text may not spell the marker, which
        would take the place of an image. AttachmentError says which."""
        if MEDIA_MARKER in text:
            raise AttachmentError(f"the text spells libmtmd's image marker {MEDIA_MARKER!r}, which stands for an "
                                  "attached image: write it another way")
        for sha in images:
            self.get(sha)

    def name(self, sha: str) -> str:
        return self._names.get(sha, sha[:12])

    def __contains__(self, sha: str) -> bool:
        return sha in self._data

    def items(self) -> Iterable[tuple[str, bytes]]:
        return self._data.items()
