"""Files that /attach and `--attach` must refuse, each with the one line that says why."""

from __future__ import annotations

from pathlib import Path

from tests.engine.retrieval.conftest import make_pdf


def bad_inputs(tmp_path: Path) -> dict[str, tuple[Path, str]]:
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "blob.bin").write_bytes(b"\x00\xff" * 64)
    (tmp_path / "binary.dat").write_bytes(b"PK\x03\x04\x00\x00" + bytes(range(256)))
    with open(tmp_path / "huge.txt", "wb") as huge:  # sparse: 200 MB of size, no 200 MB written
        huge.truncate(200 * 2**20)
    (tmp_path / "scan.pdf").write_bytes(make_pdf([[]]))
    (tmp_path / "legacy.txt").write_bytes(b"caf\xe9 \x81\x8d is neither UTF-8 nor Windows-1252\n")
    return {
        "missing": (tmp_path / "missing.md", "no such file or folder"),
        "empty folder": (tmp_path / "empty", "has no readable text files"),
        "binary": (tmp_path / "binary.dat", "is a binary file"),
        "200 MB": (tmp_path / "huge.txt", "huge.txt is 200 MiB; a text file can be at most 8 MiB"),
        "PDF without text": (tmp_path / "scan.pdf", "has no extractable text"),
        "invalid encoding": (tmp_path / "legacy.txt", "is not readable text: neither UTF-8 nor Windows-1252"),
    }
