"""`models pull hf:ORG/REPO[:QUANT]`: a GGUF from the Hugging Face hub into the shared hub
cache, where llama.cpp, huggingface_hub and every other tool find it too, so nothing is
downloaded twice.

huggingface_hub builds the URLs and headers (HF_ENDPOINT, HF_TOKEN, HF_HUB_OFFLINE), maps the
hub's errors, and provides the cache's conventions: the per-blob lock
(`.locks/models--ORG--REPO/DIGEST.lock`, taken with its own WeakFileLock, so two chatapp pulls,
or chatapp and huggingface_hub, never write one blob at once) and the snapshot's relative link
to the blob. The listing is read and checked here (types, sizes, safe relative names, hex
digests) before anything is downloaded, and the blob itself is fetched here:
huggingface_hub 2.x downloads into a per-process temporary file that it deletes when the
download is interrupted, so a Ctrl+C'd pull of a multi-GB model would start over. chatapp
writes blobs/DIGEST.incomplete instead, under the lock, stops at the listed size, resumes it
with a Range request (after a dropped connection, or in the next pull), hashes it against the
listing's sha256 (git's blob sha1 for a file the hub keeps outside LFS) and only then renames
it into place; the snapshot is linked to that checked blob and nothing else, so a final name
never holds bytes that were not checked.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from chatapp.engine.models.hub_cache import hub_cache_dir, parse_name, pick, tag_of
from chatapp.engine.models.hub_deadline import Watchdog
from chatapp.engine.models.sources import group_gguf_files, is_projector, quant_of
from chatapp.errors import ChatappError, ModelError
from chatapp.format import human_bytes

Progress = Callable[[str, int, int], None]


class PullFailed(ChatappError):
    """The pull was asked for rightly but could not finish (a full disk, a connection that kept
    dropping); what was written stays as .incomplete, and the next pull resumes it."""

    title = "Model"
    exit_code = 1


RETRIES = 5
"""Requests for one blob (a dropped connection, a body that ended short) before the pull gives
up (and the next resumes)."""
TIMEOUT = 30.0
"""Seconds without a byte before a connection counts as dropped."""
LISTING_DEADLINE = 60.0
"""Seconds for the whole of the hub's file listing (or its error answer) to arrive: a hub
that trickles it a byte at a time never leaves a read waiting TIMEOUT."""
SLOW_WINDOW = 60.0
SLOW_BYTES = 64 << 10
"""A file download that brings fewer than SLOW_BYTES in any SLOW_WINDOW seconds (about 1 KiB/s,
headers included) counts as a dropped connection: resumed, and after RETRIES one line."""
MAX_LISTING = 32 << 20
"""The most of the hub's file listing that is read: a repo of thousands of files lists in a few MB."""
MAX_ERROR_BODY = 64 << 10
"""The most of an error answer's body that is read (for its message)."""
MAX_FILE_SIZE = 1 << 44
"""16 TiB: a listed size above this is not a model file."""
CHUNK = 1 << 20

_SHA256 = re.compile(r"[0-9a-f]{64}")
_SHA1 = re.compile(r"[0-9a-f]{40}")


@dataclass(frozen=True)
class Expected:
    """What one file's bytes must be: its size and digest, from the hub's listing."""

    name: str
    size: int
    digest: str
    """Hex sha256 (an LFS file) or git's blob sha1 (a file kept in git): also its blob's name."""
    lfs: bool

    @property
    def check(self) -> str:
        return "sha256" if self.lfs else "git blob sha1"

    def hasher(self):
        if self.lfs:
            return hashlib.sha256()
        digest = hashlib.sha1(usedforsecurity=False)
        digest.update(b"blob %d\0" % self.size)
        return digest


@dataclass(frozen=True)
class Pulled:
    path: Path
    """The first part's path in its snapshot."""
    checks: tuple[str, ...]
    """How the parts were checked ("sha256", "git blob sha1"): every part was hashed."""
    projector: Path | None = None
    """The vision projector (mmproj) pulled with it, checked the same way, in its snapshot."""


def pull_from_hub(spec: str, progress: Progress | None = None, *, force: bool = False,
                  with_projector: bool = True) -> Pulled:
    """Download the GGUF an hf: name points to (every part of a split one) into the hub cache,
    and the repo's vision projector with it, as llama.cpp's `-hf` does (`pick_projector`).
    ModelError for what the hub refuses or answers wrongly, PullFailed for what may pass."""
    import httpx2
    from huggingface_hub.errors import (
        EntryNotFoundError, GatedRepoError, HfHubHTTPError, LocalEntryNotFoundError, OfflineModeIsEnabled,
        RepositoryNotFoundError, RevisionNotFoundError)

    repo_id, quant = parse_name(spec)
    try:
        commit, siblings = _listing(repo_id)
        groups = tuple(group_gguf_files(Path(name) for name in siblings))
        if not groups:
            raise ModelError(f"hf:{repo_id} holds no GGUF file")
        group = pick(groups, quant)
        if group is None:
            have = ", ".join(tag_of(g) for g in groups)
            raise ModelError(f"hf:{repo_id} has no {quant} GGUF (it has {have})")
        if group.problem:
            raise ModelError(f"hf:{repo_id}: {group.problem}")
        parts = [_expected(repo_id, part.as_posix(), siblings[part.as_posix()]) for part in group.parts]
        paths = [_pull_file(repo_id, commit, part, progress, force=force) for part in parts]
        mmproj = pick_projector(siblings, group.parts[0].as_posix()) if with_projector else None
        projector_path = None
        if mmproj is not None:
            projector = _expected(repo_id, mmproj, siblings[mmproj])
            parts.append(projector)
            projector_path = _pull_file(repo_id, commit, projector, progress, force=force)
    except GatedRepoError:
        raise ModelError(f"hf:{repo_id} is gated or private: accept its terms on the hub and set HF_TOKEN "
                         "to a token that may read it") from None
    except RepositoryNotFoundError:
        raise ModelError(f"hf:{repo_id}: no such repository on the hub (or it is private: set HF_TOKEN)") from None
    except (RevisionNotFoundError, EntryNotFoundError) as exc:
        raise ModelError(f"hf:{repo_id}: {_first_line(exc)}") from None
    except (OfflineModeIsEnabled, LocalEntryNotFoundError):
        raise ModelError(f"cannot pull hf:{repo_id}: HF_HUB_OFFLINE is set, or the hub cannot be reached") from None
    except HfHubHTTPError as exc:
        raise ModelError(f"cannot pull hf:{repo_id}: {_first_line(exc)}") from None
    except httpx2.TooManyRedirects:
        raise ModelError(f"cannot pull hf:{repo_id}: the hub's answer redirects in a loop") from None
    except httpx2.TransportError as exc:
        raise PullFailed(f"the connection to the hub failed pulling hf:{repo_id} ({_first_line(exc)}); "
                         "the same pull resumes where it stopped") from None
    except httpx2.HTTPError as exc:
        raise ModelError(f"cannot pull hf:{repo_id}: the hub's answer could not be read ({_first_line(exc)})") from None
    except OSError as exc:
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            raise PullFailed(f"the disk is full pulling hf:{repo_id} into {hub_cache_dir()}; what was written "
                             "is kept and the next pull resumes it") from None
        raise ModelError(f"cannot pull hf:{repo_id}: {exc.strerror or exc}") from None
    return Pulled(paths[0], tuple(dict.fromkeys(part.check for part in parts)), projector_path)


PROJECTOR_PRECISIONS = ("f16", "bf16", "q8_0", "f32")
"""The projector precision taken when a repo offers several (unsloth's and ggml-org's repos
offer F16, BF16, F32 and sometimes Q8_0): F16 first, the precision llama.cpp's converter
writes projectors in by default and the one model cards pair with every quant."""


def pick_projector(names: dict[str, object] | list[str], model: str) -> str | None:
    """The mmproj GGUF that goes with `model` in a repo's listing: one in the model's folder,
    else one at the repo's top (repos that keep each quant in a folder keep it there); of
    several, the one whose name shares the model's quant, else by PROJECTOR_PRECISIONS, else the
    first by name. None: the repo has no projector (a text model)."""
    folder, _, file = model.rpartition("/")
    quant = (quant_of(file) or "").lower()
    projectors = sorted(name for name in names if is_projector(name.rpartition("/")[2]))
    for place in dict.fromkeys((folder, "")):
        here = [name for name in projectors if name.rpartition("/")[0] == place]
        if not here:
            continue
        by_name = {name: name.rpartition("/")[2].lower() for name in here}
        same = [name for name, base in by_name.items() if quant and quant in base]
        if len(same) == 1:
            return same[0]
        for precision in PROJECTOR_PRECISIONS:
            tagged = re.compile(rf"(?<![a-z0-9]){precision}(?![a-z0-9])")
            matching = [name for name, base in by_name.items() if tagged.search(base)]
            if matching:
                return matching[0]
        return here[0]
    return None


def _listing(repo_id: str) -> tuple[str, dict[str, dict]]:
    """The revision `main` is at, and the repo's GGUF files by name (each the listing's dict for
    it), from the hub's answer read with a cap, every name checked to be a safe relative path."""
    from huggingface_hub import HfApi
    from huggingface_hub.utils import build_hf_headers, get_session

    import httpx2

    url = f"{HfApi().endpoint}/api/models/{repo_id}"
    with Watchdog.within(LISTING_DEADLINE) as watchdog:
        try:
            with get_session().stream("GET", url, params={"blobs": True}, headers=_unpooled(build_hf_headers()),
                                      follow_redirects=True, timeout=TIMEOUT, extensions=watchdog.extensions) as reply:
                _raise_for_status(reply)
                body = _read_capped(reply, MAX_LISTING)
        except httpx2.TransportError:
            if watchdog.expired:
                raise PullFailed(f"the hub did not send hf:{repo_id}'s file listing within {LISTING_DEADLINE:g} s "
                                 "(it trickled or stalled); nothing was downloaded") from None
            raise
    if body is None:
        raise _bad_listing(repo_id, f"it is over {MAX_LISTING >> 20} MiB")
    try:
        data = json.loads(body)
    except RecursionError:
        raise _bad_listing(repo_id, "its JSON is nested too deep") from None
    except ValueError:
        raise _bad_listing(repo_id, "it is not JSON") from None
    if not isinstance(data, dict):
        raise _bad_listing(repo_id, "it is not a JSON object")
    commit, siblings = data.get("sha"), data.get("siblings")
    if not isinstance(commit, str) or not _SHA1.fullmatch(commit):
        raise _bad_listing(repo_id, "its `sha` is not a commit hash")
    if not isinstance(siblings, list):
        raise _bad_listing(repo_id, "its `siblings` is not a list")
    ggufs = {}
    for sibling in siblings:
        name = sibling.get("rfilename") if isinstance(sibling, dict) else None
        if not isinstance(name, str):
            raise _bad_listing(repo_id, "a file in it has no name")
        if not name.lower().endswith(".gguf"):
            continue
        if not _safe_name(name):
            raise _bad_listing(repo_id, f"the file name {name!r} is not a safe relative path")
        ggufs[name] = sibling
    return commit, ggufs


def _safe_name(name: str) -> bool:
    """A relative path inside the snapshot: no absolute, empty, `.` or `..` part, no backslash
    or control character, no part over 255 bytes."""
    parts = name.split("/")
    return (len(name) <= 1024 and not any(ord(c) < 32 or c in "\\\x7f" for c in name)
            and all(part not in ("", ".", "..") and len(part.encode("utf-8", "replace")) <= 255 for part in parts))


def _expected(repo_id: str, name: str, sibling: dict) -> Expected:
    """The size and digest the listing gives one file, or ModelError for a listing that gives
    no usable one (a size that is not a whole number, a digest that is not hex)."""
    def size_of(value: object) -> int:
        if type(value) is not int or not 0 <= value <= MAX_FILE_SIZE:
            raise _bad_listing(repo_id, f"the size of {name!r} is not a number of bytes")
        return value

    lfs = sibling.get("lfs")
    if lfs is not None:
        if not isinstance(lfs, dict):
            raise _bad_listing(repo_id, f"the LFS facts of {name!r} are not an object")
        sha256 = lfs.get("sha256")
        if not isinstance(sha256, str) or not _SHA256.fullmatch(sha256):
            raise _bad_listing(repo_id, f"the sha256 of {name!r} is not 64 hex digits")
        return Expected(name, size_of(lfs.get("size")), sha256, lfs=True)
    blob_id = sibling.get("blobId")
    if not isinstance(blob_id, str) or not _SHA1.fullmatch(blob_id):
        raise _bad_listing(repo_id, f"{name!r} has neither a sha256 nor a git blob id, so it cannot be checked")
    return Expected(name, size_of(sibling.get("size")), blob_id, lfs=False)


def _bad_listing(repo_id: str, why: str) -> ModelError:
    return ModelError(f"hf:{repo_id}: the hub's file listing cannot be used ({why}); nothing was downloaded")


def _pull_file(repo_id: str, commit: str, part: Expected, progress: Progress | None, *, force: bool) -> Path:
    """One file: its blob checked (fetched when missing or forced) and linked into the
    snapshot, all under huggingface_hub's lock for that blob."""
    from huggingface_hub.file_download import _create_symlink, repo_folder_name

    cache = hub_cache_dir()
    folder = repo_folder_name(repo_id=repo_id, repo_type="model")
    storage = cache / folder
    blob = storage / "blobs" / part.digest
    pointer = storage / "snapshots" / commit / part.name
    label = f"hf:{repo_id} {Path(part.name).name}"
    lock = cache / ".locks" / folder / f"{part.digest}.lock"  # hf_hub_download's: the blob's etag
    for directory in (lock.parent, blob.parent, pointer.parent):
        directory.mkdir(parents=True, exist_ok=True)
    with _blob_lock(lock, progress, label):
        if force or not blob.exists():
            _fetch_blob(repo_id, commit, part, blob, progress, label)
        elif _hash(blob, part) != part.digest:  # another tool's copy: reported, not removed
            raise ModelError(f"hf:{repo_id} {Path(part.name).name}: the cached copy {blob} is damaged (its "
                             f"{part.check} is not the hub's); remove it and pull again")
        _create_symlink(str(blob), str(pointer), new_blob=False)
    return pointer


@contextlib.contextmanager
def _blob_lock(path: Path, progress: Progress | None, label: str) -> Iterator[None]:
    """huggingface_hub's lock on one blob; says so when another download holds it."""
    from filelock import Timeout
    from huggingface_hub.utils import WeakFileLock

    with contextlib.ExitStack() as stack:
        try:
            stack.enter_context(WeakFileLock(path, timeout=0.2))
        except Timeout:
            if progress is not None:
                progress(f"{label}: waiting for another download of it", 0, 0)
            stack.enter_context(WeakFileLock(path))
        yield


def _fetch_blob(repo_id: str, commit: str, part: Expected, blob: Path, progress: Progress | None,
                label: str) -> None:
    """blobs/DIGEST for one file, resumed from blobs/DIGEST.incomplete (the caller holds the
    blob's lock), written up to the listed size and no further, hashed, then renamed."""
    partial = blob.with_name(f"{part.digest}.incomplete")
    resumed = _download(repo_id, commit, part, partial, progress, label)
    actual = _hash(partial, part)
    if actual != part.digest and resumed:  # what was kept from before may be the wrong part: once more, whole
        partial.unlink(missing_ok=True)
        _download(repo_id, commit, part, partial, progress, label)
        actual = _hash(partial, part)
    if actual != part.digest:
        partial.unlink(missing_ok=True)
        raise ModelError(f"hf:{repo_id} {Path(part.name).name}: {part.check} {actual[:12]}… is not the hub's "
                         f"{part.digest[:12]}…; the download was removed")
    os.replace(partial, blob)


def _download(repo_id: str, commit: str, part: Expected, partial: Path, progress: Progress | None,
              label: str) -> bool:
    """Bring the partial file to the listed size; whether it started from bytes already there."""
    import httpx2
    from huggingface_hub import hf_hub_url
    from huggingface_hub.utils import build_hf_headers, get_session

    url = hf_hub_url(repo_id, part.name, revision=commit)
    size = part.size
    resumed, slow = False, 0
    for attempt in range(RETRIES):
        done = partial.stat().st_size if partial.exists() else 0
        if done > size:  # longer than the file can be: not resumable
            done = 0
        if done == size:  # complete (a pull stopped while hashing it): hashed as it is
            with _open_at(partial, done):
                pass
            return resumed or done > 0
        resumed = resumed or done > 0
        headers = _unpooled(build_hf_headers())
        if done:
            headers["Range"] = f"bytes={done}-"
        watchdog = Watchdog.at_least(SLOW_BYTES, per=SLOW_WINDOW)
        try:
            with watchdog, get_session().stream("GET", url, headers=headers, follow_redirects=True, timeout=TIMEOUT,
                                                extensions=watchdog.extensions) as reply:
                if reply.status_code == 416:  # the hub disagrees about what is there: start again
                    with _open_at(partial, 0):
                        pass
                    continue
                _raise_for_status(reply)
                _check_etag(repo_id, reply, part)
                if reply.status_code == 206 and _range_start(reply) != done:  # not the part asked for
                    with _open_at(partial, 0):
                        pass
                    continue
                if reply.status_code != 206:
                    done = 0  # the server sent the whole file: start the partial again
                with _open_at(partial, done) as out:
                    for chunk in reply.iter_bytes():  # each piece as it comes, for the watchdog
                        watchdog.received(len(chunk))
                        chunk = chunk[:size - done]  # nothing past the listed size is written
                        out.write(chunk)
                        done += len(chunk)
                        if progress is not None:
                            progress(label, done, size)
                        if done == size:
                            break
            if done == size:
                return resumed
        except httpx2.TransportError:
            slow += watchdog.expired
            if attempt == RETRIES - 1 and slow:
                raise PullFailed(f"the hub sent hf:{repo_id} {Path(part.name).name} slower than "
                                 f"{human_bytes(SLOW_BYTES)} in {SLOW_WINDOW:g} s, {slow} of {RETRIES} tries; what "
                                 "arrived is kept and the same pull resumes it") from None
            if attempt == RETRIES - 1:
                raise
    raise PullFailed(f"the hub did not send the whole of hf:{repo_id} {Path(part.name).name} in {RETRIES} tries; "
                     "the same pull resumes where it stopped")


def _unpooled(headers: dict) -> dict:
    """Headers that ask for a connection of the request's own: one from the pool (opened by an
    earlier request) would be out of its Watchdog's reach, and a pull makes few requests."""
    return {**headers, "Connection": "close"}


def _check_etag(repo_id: str, reply, part: Expected) -> None:
    """The hub names the file it serves by its ETag (X-Linked-Etag on a redirect to storage):
    a file other than the listed one is refused before a byte is written."""
    from huggingface_hub.file_download import _normalize_etag

    first = (list(reply.history) or [reply])[0]
    stated = _normalize_etag(first.headers.get("X-Linked-Etag") or first.headers.get("ETag"))
    if stated and stated != part.digest:
        raise ModelError(f"hf:{repo_id} {Path(part.name).name}: the hub serves {stated[:12]}… but its listing says "
                         f"{part.check} {part.digest[:12]}…; refused, nothing was linked")


def _range_start(reply) -> int | None:
    match = re.fullmatch(r"bytes (\d+)-\d+/(?:\d+|\*)", reply.headers.get("Content-Range", "").strip())
    return int(match[1]) if match else None


@contextlib.contextmanager
def _open_at(path: Path, offset: int):
    """The partial file opened for writing at `offset`, anything after it cut off."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o644)
    with open(fd, "wb") as out:
        out.truncate(offset)
        out.seek(offset)
        yield out


def _hash(path: Path, part: Expected) -> str:
    digest = part.hasher()
    with open(path, "rb") as file:
        while chunk := file.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _read_capped(reply, limit: int) -> bytes | None:
    """The body of a streamed answer, or None past `limit` bytes."""
    body = bytearray()
    for chunk in reply.iter_bytes():
        body += chunk
        if len(body) > limit:
            return None
    return bytes(body)


def _raise_for_status(reply) -> None:
    """huggingface_hub's error for a failed answer, its body read with a cap first."""
    import httpx2
    from huggingface_hub.utils import hf_raise_for_status

    if reply.status_code < 400:
        return
    body = bytearray()
    for chunk in reply.iter_bytes():
        body += chunk
        if len(body) > MAX_ERROR_BODY:
            del body[MAX_ERROR_BODY:]
            break
    headers = {k: v for k, v in reply.headers.items() if k.lower() not in ("content-encoding", "content-length")}
    hf_raise_for_status(httpx2.Response(reply.status_code, headers=headers, content=bytes(body),
                                        request=reply.request))


def _first_line(exc: Exception) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]
