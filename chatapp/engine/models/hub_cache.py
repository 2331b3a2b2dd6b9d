"""GGUF models in the Hugging Face hub cache (where `llama-cli -hf` and `hf download` put
them) and in llama.cpp's older flat cache, found read-only and named `hf:ORG/REPO:QUANT`.

The cache's layout (models--ORG--REPO/{refs,snapshots,blobs}, snapshot files symlinked to
blobs) is read by huggingface_hub's own `scan_cache_dir`, which also reports a damaged repo
as a warning instead of failing the scan.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from chatapp.engine.models.sources import NAME_PART, FoundModel, GgufGroup, found_group, group_gguf_files, quant_of
from chatapp.errors import ModelError

PREFERRED_QUANTS = ("Q4_K_M", "Q8_0")
"""llama.cpp's rule for `-hf ORG/REPO` without a quant: Q4_K_M, then Q8_0, then the first GGUF."""
NAMED_PROBLEMS = 3
"""Damaged repos named in a line each; past that, one line counts the rest."""
_FOREIGN = re.compile(r"Repo path is not a (?:directory|valid HuggingFace cache directory): (?P<path>.*)"
                      r"|Repo type must be one of .*, found `.*` \((?P<typed>.*)\)\.", re.DOTALL)
"""scan_cache_dir's words for an entry that is no repo's folder at all (not damage to one)."""
_MISSING_COMMITS = "Reference(s) refer to missing commit hashes: "
"""scan_cache_dir's words for refs naming no snapshot, followed by what the refs hold: text
from files chatapp did not write (a ref may be a link to /etc/shadow), never shown."""


def hub_cache_dir() -> Path:
    """HF_HUB_CACHE, else HF_HOME/hub, else XDG_CACHE_HOME/huggingface/hub, else
    ~/.cache/huggingface/hub: huggingface_hub's own order, read when asked (its constants are
    fixed when it is imported)."""
    env = os.environ
    if env.get("HF_HUB_CACHE"):
        return Path(env["HF_HUB_CACHE"]).expanduser()
    if env.get("HF_HOME"):
        return Path(env["HF_HOME"]).expanduser() / "hub"
    if env.get("XDG_CACHE_HOME"):
        return Path(env["XDG_CACHE_HOME"]).expanduser() / "huggingface" / "hub"
    return Path.home() / ".cache" / "huggingface" / "hub"


def llama_cache_dir() -> Path:
    """LLAMA_CACHE, else llama.cpp's own cache folder (XDG_CACHE_HOME/llama.cpp on Linux)."""
    env = os.environ
    if env.get("LLAMA_CACHE"):
        return Path(env["LLAMA_CACHE"]).expanduser()
    base = Path(env["XDG_CACHE_HOME"]).expanduser() if env.get("XDG_CACHE_HOME") else Path.home() / ".cache"
    return base / "llama.cpp"


@dataclass(frozen=True)
class CachedRepo:
    repo_id: str
    groups: tuple[GgufGroup, ...]
    """The GGUF models of the revision `main` points at (else the newest one)."""


def cached_repos(cache: Path | None = None) -> tuple[list[CachedRepo], list[str]]:
    """Every model repo in the hub cache that holds a GGUF, and one line per damaged repo."""
    from huggingface_hub import scan_cache_dir
    from huggingface_hub.errors import CorruptedCacheException

    cache = cache or hub_cache_dir()
    if not cache.is_dir():
        return [], []
    try:
        info = scan_cache_dir(cache)
    except (OSError, CorruptedCacheException) as exc:
        return [], [f"Hugging Face cache {cache}: {exc}"]
    except ValueError:  # a ref that is not UTF-8 fails the whole scan: one repo at a time then
        scanned, problems = _scan_each_repo(cache)
    else:
        scanned, problems = info.repos, [str(warning) for warning in info.warnings]
    problems = _summarized(cache, problems)
    repos = []
    for repo in sorted(scanned, key=lambda r: r.repo_id):
        if repo.repo_type != "model" or not repo.revisions:
            continue
        revision = max(repo.revisions, key=lambda r: ("main" in r.refs, r.last_modified))
        groups = group_gguf_files(f.file_path for f in revision.files)
        if groups:
            repos.append(CachedRepo(repo.repo_id, tuple(groups)))
    return repos, problems


def _scan_each_repo(cache: Path) -> tuple[list, list[str]]:
    """scan_cache_dir's work, one repo at a time with huggingface_hub's own scanner, so that a
    repo it cannot read (a ref that is not UTF-8 raises UnicodeDecodeError, which scan_cache_dir
    lets through) is one line and the others are still listed."""
    from huggingface_hub.errors import CorruptedCacheException
    from huggingface_hub.utils._cache_manager import _scan_cached_repo

    repos, problems = [], []
    try:
        folders = sorted(entry for entry in cache.iterdir() if entry.name.startswith(("models--", "datasets--",
                                                                                       "spaces--")))
    except OSError as exc:
        return [], [f"Hugging Face cache {cache}: {exc}"]
    for folder in folders:
        try:
            repos.append(_scan_cached_repo(folder))
        except (OSError, ValueError, CorruptedCacheException) as exc:  # UnicodeDecodeError is a ValueError
            why = "a ref in it is not UTF-8 text" if isinstance(exc, UnicodeDecodeError) else str(exc)
            problems.append(f"{folder.name}: {why}")
    return repos, problems


def _summarized(cache: Path, problems: list[str]) -> list[str]:
    """The scan's problems as notes a person reads: the first few damaged repos a line each and
    a count of the rest, and every entry that is no repo's folder (a cache shared with other
    files) in one line, however many: 100,000 of them printed 100,000 notes."""
    foreign, damaged = [], []
    for problem in problems:
        match = _FOREIGN.fullmatch(problem)
        if match:
            foreign.append(Path(match["path"] or match["typed"]).name)
        elif problem.startswith(_MISSING_COMMITS) and problem.endswith(").") and " (" in problem:
            folder = Path(problem[problem.rindex(" (") + 2:-2]).name
            damaged.append(f"{folder}: a ref in it names a commit it holds no snapshot of")
        else:
            damaged.append(problem)
    notes = [f"Hugging Face cache: {problem}" for problem in damaged[:NAMED_PROBLEMS]]
    if len(damaged) > NAMED_PROBLEMS:
        more = len(damaged) - NAMED_PROBLEMS
        notes.append(f"Hugging Face cache {cache}: {more:,} more damaged repo{'s' if more != 1 else ''}, "
                     "passed over like these")
    if foreign:
        examples = ", ".join(repr(name) for name in sorted(foreign)[:NAMED_PROBLEMS])
        notes.append(f"Hugging Face cache {cache}: {len(foreign):,} entr{'y is' if len(foreign) == 1 else 'ies are'} "
                     f"not a repo's folder (models--ORG--REPO), passed over: {examples}"
                     + (", …" if len(foreign) > NAMED_PROBLEMS else ""))
    return notes


def tag_of(group: GgufGroup) -> str:
    """The QUANT part of a name: the file's quantization, or its name when that says none."""
    return quant_of(group.first.name) or group.first.name.removesuffix(".gguf")


def names(repo: CachedRepo) -> list[str]:
    """The name of each of the repo's models, hf:ORG/REPO:QUANT, in the order of its groups."""
    tags = [tag_of(group) for group in repo.groups]
    return [f"hf:{repo.repo_id}:{group.first.name.removesuffix('.gguf') if tags.count(tag) > 1 else tag}"
            # two files of one quant (in two folders): the file name tells them apart
            for group, tag in zip(repo.groups, tags, strict=True)]


def found(repo: CachedRepo) -> list[FoundModel]:
    return [found_group(name, "huggingface", group) for name, group in zip(names(repo), repo.groups, strict=True)]


def parse_name(spec: str) -> tuple[str, str | None]:
    """hf:ORG/REPO[:QUANT] -> (ORG/REPO, QUANT or None); a malformed name is a ModelError."""
    body = spec.removeprefix("hf:")
    repo_id, _, quant = body.partition(":")
    parts = repo_id.split("/")
    if len(parts) != 2 or not all(NAME_PART.match(part) for part in parts) or (_ and not quant):
        raise ModelError(f"{spec!r} is not a Hugging Face model name; use hf:ORG/REPO or hf:ORG/REPO:QUANT")
    return repo_id, quant or None


def pick(groups: tuple[GgufGroup, ...], quant: str | None) -> GgufGroup | None:
    """The GGUF a quant names (its quantization or file name, any case), or llama.cpp's choice."""
    if quant is not None:
        wanted = quant.upper()
        return next((g for g in groups if (quant_of(g.first.name) or "") == wanted
                     or g.first.name.removesuffix(".gguf").upper() == wanted), None)
    for preferred in PREFERRED_QUANTS:
        chosen = next((g for g in groups if quant_of(g.first.name) == preferred), None)
        if chosen is not None:
            return chosen
    return groups[0] if groups else None


def resolve(spec: str) -> tuple[Path, str]:
    """The first file of the cached model an hf: name points to, and its name as listed (the
    quant llama.cpp's rule picked filled in); ModelError when it is not here."""
    repo_id, quant = parse_name(spec)
    repos, _ = cached_repos()
    repo = next((r for r in repos if r.repo_id.lower() == repo_id.lower()), None)
    if repo is None:
        raise ModelError(f"hf:{repo_id} is not in the Hugging Face cache ({hub_cache_dir()}); "
                         f"run: chatapp models pull {spec}")
    group = pick(repo.groups, quant)
    if group is None:
        have = ", ".join(tag_of(g) for g in repo.groups)
        raise ModelError(f"hf:{repo_id} has no {quant} GGUF in the cache (it has {have}); "
                         f"run: chatapp models pull {spec}")
    if group.problem:
        raise ModelError(f"{spec}: {group.problem}")
    return group.first, names(repo)[repo.groups.index(group)]


def flat_cache_models(cache: Path | None = None) -> list[FoundModel]:
    """llama.cpp's older flat cache: GGUF files side by side, listed as local files."""
    cache = cache or llama_cache_dir()
    try:
        files = [entry for entry in cache.iterdir() if entry.is_file()]
    except OSError:
        return []
    return [found_group(group.first.name, "local", group) for group in group_gguf_files(files)]
