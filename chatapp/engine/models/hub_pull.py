"""`models pull hf:ORG/REPO[:QUANT]`: a GGUF from the Hugging Face hub into the shared hub
cache, where llama.cpp, huggingface_hub and every other tool find it too, so nothing is
downloaded twice.

huggingface_hub lists the repo, builds the file's URL and headers (HF_ENDPOINT, HF_TOKEN,
HF_HUB_OFFLINE), maps the hub's errors, and links the blob into the snapshot with its refs
(hf_hub_download finds the blob in place and only links it). The blob itself is fetched here:
huggingface_hub 2.x downloads into a per-process temporary file that it deletes when the
download is interrupted (file_download.py, _download_to_tmp_and_move), so a Ctrl+C'd pull of
a multi-GB model would start over. chatapp writes blobs/SHA256.incomplete instead, resumes it
with a Range request (after a dropped connection, or in the next pull), checks its sha256
against the hub's before renaming it into place, and so never leaves a half or wrong file
where discovery would list it.
"""

from __future__ import annotations

import errno
from collections.abc import Callable
from pathlib import Path

from chatapp.engine.filecache import hash_file
from chatapp.engine.models.hub_cache import hub_cache_dir, parse_name, pick, tag_of
from chatapp.engine.models.sources import group_gguf_files
from chatapp.errors import ChatappError, ModelError

Progress = Callable[[str, int, int], None]


class PullFailed(ChatappError):
    """The pull was asked for rightly but could not finish (a full disk, a connection that kept
    dropping); what was written stays as .incomplete, and the next pull resumes it."""

    title = "Model"
    exit_code = 1


def pull_from_hub(spec: str, progress: Progress | None = None, *, force: bool = False) -> Path:
    """Download the GGUF an hf: name points to (every part of a split one) into the hub cache;
    returns the first part's path in its snapshot. ModelError for what the hub refuses."""
    import httpx2
    from huggingface_hub import HfApi, hf_hub_download
    from huggingface_hub.errors import (
        EntryNotFoundError, GatedRepoError, HfHubHTTPError, LocalEntryNotFoundError, OfflineModeIsEnabled,
        RepositoryNotFoundError, RevisionNotFoundError)

    repo_id, quant = parse_name(spec)
    try:
        info = HfApi().model_info(repo_id, files_metadata=True)
        siblings = {s.rfilename: s for s in info.siblings or [] if s.rfilename.lower().endswith(".gguf")}
        groups = tuple(group_gguf_files(Path(name) for name in siblings))
        if not groups:
            raise ModelError(f"hf:{repo_id} holds no GGUF file")
        group = pick(groups, quant)
        if group is None:
            have = ", ".join(tag_of(g) for g in groups)
            raise ModelError(f"hf:{repo_id} has no {quant} GGUF (it has {have})")
        if group.problem:
            raise ModelError(f"hf:{repo_id}: {group.problem}")
        paths = []
        for part in group.parts:
            name = part.as_posix()
            sibling = siblings[name]
            label = f"hf:{repo_id} {part.name}"
            if sibling.lfs is not None:
                _fetch_blob(repo_id, name, info.sha, sibling.lfs.sha256, sibling.lfs.size, progress, label,
                            force=force)
            paths.append(Path(hf_hub_download(repo_id, name, revision=info.sha, cache_dir=hub_cache_dir())))
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
    except httpx2.TransportError as exc:
        raise PullFailed(f"the connection to the hub failed pulling hf:{repo_id} ({_first_line(exc)}); "
                         "the same pull resumes where it stopped") from None
    except OSError as exc:
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            raise PullFailed(f"the disk is full pulling hf:{repo_id} into {hub_cache_dir()}; what was written "
                           "is kept and the next pull resumes it") from None
        raise ModelError(f"cannot pull hf:{repo_id}: {exc.strerror or exc}") from None
    return paths[0]


RETRIES = 5
"""Range requests after a dropped connection before the pull gives up (and the next resumes)."""
TIMEOUT = 30.0
"""Seconds without a byte before a connection counts as dropped."""


def _fetch_blob(repo_id: str, name: str, revision: str, sha256: str, size: int, progress: Progress | None,
                label: str, *, force: bool) -> None:
    """blobs/SHA256 for one LFS file, resumed from blobs/SHA256.incomplete, verified, renamed."""
    import httpx2
    from huggingface_hub import hf_hub_url
    from huggingface_hub.utils import build_hf_headers, get_session, hf_raise_for_status

    blob = hub_cache_dir() / f"models--{repo_id.replace('/', '--')}" / "blobs" / sha256
    if blob.exists() and not force:
        if hash_file(blob) != sha256:  # another tool's copy: reported, not removed
            raise ModelError(f"hf:{repo_id} {Path(name).name}: the cached copy {blob} is damaged (its sha256 is "
                             "not the hub's); remove it and pull again")
        return
    partial = blob.with_name(f"{sha256}.incomplete")
    partial.parent.mkdir(parents=True, exist_ok=True)
    url = hf_hub_url(repo_id, name, revision=revision)
    for attempt in range(RETRIES):
        done = partial.stat().st_size if partial.exists() else 0
        headers = build_hf_headers()
        if done:
            headers["Range"] = f"bytes={done}-"
        try:
            with get_session().stream("GET", url, headers=headers, follow_redirects=True, timeout=TIMEOUT) as reply:
                if reply.status_code >= 400:
                    reply.read()
                    hf_raise_for_status(reply)
                if reply.status_code != 206:
                    done = 0  # the server sent the whole file: start the partial again
                with open(partial, "ab" if done else "wb") as out:
                    for chunk in reply.iter_bytes(1 << 20):
                        out.write(chunk)
                        done += len(chunk)
                        if progress is not None:
                            progress(label, done, size)
            break
        except httpx2.TransportError:
            if attempt == RETRIES - 1:
                raise
    actual = hash_file(partial)
    if actual != sha256:
        partial.unlink(missing_ok=True)
        raise ModelError(f"hf:{repo_id} {Path(name).name}: sha256 {actual[:12]}… is not the hub's {sha256[:12]}…; "
                         "the download was removed")
    partial.replace(blob)


def _first_line(exc: Exception) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]
