"""chatapp's own tools, all read-only: the date and time, and reading a file or listing a
folder under the roots the user allows (`[tools] roots` in the config).

A path is refused, in one line the model reads as the tool's result, when it has a `..` part,
when it is absolute and under no root, or when it resolves (symlinks followed) to a place
outside every root: a link inside a root that points out of it is an escape, not a path.

Some places are never read or listed, even under a root (a root of `~` or `/` included): the
home folder's key and credential stores (`GUARDED_IN_HOME`), `/proc`, `/sys` and `/dev` (a
process's environment, its memory, devices that never end), and chatapp's own config, data and
cache folders (the config holds MCP servers' env and headers, the data folder the sessions
database). Each is checked after resolving, so no link or `..` reaches one.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path, PurePath
from typing import Any

from chatapp.engine.tools.spec import BUILTIN, ToolResult, ToolSpec, cap_result
from chatapp.paths import read_capped

MAX_READ_BYTES = 256 * 1024
"""The most of a file read_file reads; what the model gets is cut further by cap_result."""
MAX_LISTED = 500
"""The most entries list_folder names."""
GUARDED_IN_HOME = (".ssh", ".gnupg", ".aws", ".azure", ".kube", ".docker", ".netrc", ".git-credentials",
                   ".pgpass", ".password-store", ".config/gcloud", ".config/gh", ".local/share/keyrings")
"""Under the home folder: where keys, tokens and passwords live."""
GUARDED_SYSTEM = ("/proc", "/sys", "/dev")

_PATH = {"type": "object", "properties": {"path": {"type": "string", "description": "A path under an allowed root"}},
         "required": ["path"]}

CURRENT_TIME = ToolSpec("current_time", "The current local date, time, weekday and time zone.",
                        {"type": "object", "properties": {}}, BUILTIN)
READ_FILE = ToolSpec("read_file", "Read a UTF-8 text file under a folder the user allowed.", _PATH, BUILTIN)
LIST_FOLDER = ToolSpec("list_folder", "List the files and folders in a folder the user allowed.", _PATH, BUILTIN)


class PathRefused(ValueError):
    """A path a built-in tool will not touch, with why."""


@dataclass(frozen=True)
class Roots:
    """The folders read_file and list_folder may look in (resolved once, symlinks followed)."""

    folders: tuple[Path, ...]
    guarded: tuple[Path, ...] = ()
    """Places never read, even under a root (see the module's docstring), resolved."""

    @classmethod
    def of(cls, folders: Sequence[str | Path]) -> "Roots":
        return cls(tuple(Path(os.path.expanduser(str(f))).resolve() for f in folders), guarded_places())

    def _guard(self, real: Path, asked: str) -> Path:
        for place in self.guarded:
            if real == place or real.is_relative_to(place):
                raise PathRefused(f"{asked!r} is in {place}, which chatapp's tools never read")
        return real

    def place(self, asked: str) -> Path:
        """The real path `asked` names under a root; PathRefused otherwise."""
        if not self.folders:
            raise PathRefused("no folder is allowed: add one to [tools] roots in the config")
        if not isinstance(asked, str) or not asked.strip() or "\0" in asked:
            raise PathRefused("the path is empty or not text")
        pure = PurePath(os.path.expanduser(asked))
        if ".." in pure.parts:
            raise PathRefused(f"{asked!r} has a '..' part; give a path under an allowed root")
        candidates = [Path(pure)] if pure.is_absolute() else [root / pure for root in self.folders]
        for candidate in candidates:
            try:
                real = candidate.resolve(strict=True)
            except (OSError, RuntimeError):
                continue
            if any(real == root or real.is_relative_to(root) for root in self.folders):
                return self._guard(real, asked)
            raise PathRefused(f"{asked!r} is outside the allowed folders")
        raise PathRefused(f"{asked!r} does not exist under the allowed folders")


def guarded_places() -> tuple[Path, ...]:
    """The places a built-in tool never reads, each resolved (a link to one is that place)."""
    from chatapp import paths

    home = Path.home()
    places = [home / name for name in GUARDED_IN_HOME] + [Path(p) for p in GUARDED_SYSTEM]
    places += [paths.config_dir(), paths.data_dir(), paths.cache_dir()]
    return tuple(dict.fromkeys(p.resolve() for p in places))


def current_time(_args: dict[str, Any]) -> ToolResult:
    now = datetime.now().astimezone()
    return ToolResult(now.strftime("%A %Y-%m-%d %H:%M:%S %Z (UTC%z)"))


def read_file(roots: Roots, args: dict[str, Any]) -> ToolResult:
    try:
        path = roots.place(args.get("path", ""))
        data = read_capped(path, MAX_READ_BYTES)
    except PathRefused as exc:
        return ToolResult(f"refused: {exc}", error=True)
    except OSError as exc:
        return ToolResult(f"cannot read {args.get('path')!r}: {exc.strerror or exc}", error=True)
    if b"\0" in data[:8192]:
        return ToolResult(f"{args.get('path')!r} is a binary file, not text", error=True)
    text, truncated = cap_result(data.decode("utf-8", "replace"))
    return ToolResult(text, truncated=truncated)


def list_folder(roots: Roots, args: dict[str, Any]) -> ToolResult:
    try:
        path = roots.place(args.get("path", ""))
        if not path.is_dir():
            raise PathRefused(f"{args.get('path')!r} is not a folder")
        entries = sorted(os.scandir(path), key=lambda e: e.name)
    except PathRefused as exc:
        return ToolResult(f"refused: {exc}", error=True)
    except OSError as exc:
        return ToolResult(f"cannot list {args.get('path')!r}: {exc.strerror or exc}", error=True)
    lines = []
    for entry in entries[:MAX_LISTED]:
        try:
            mode = entry.stat(follow_symlinks=False).st_mode
        except OSError:
            continue
        if stat.S_ISDIR(mode):
            lines.append(entry.name + "/")
        elif stat.S_ISLNK(mode):
            lines.append(entry.name + " (link)")
        else:
            lines.append(f"{entry.name} ({entry.stat(follow_symlinks=False).st_size:,} bytes)")
    if len(entries) > MAX_LISTED:
        lines.append(f"[... {len(entries) - MAX_LISTED:,} more entries]")
    return ToolResult("\n".join(lines) or "(empty folder)")


def builtin_tools(roots: Roots) -> dict[str, tuple[ToolSpec, Callable[[dict[str, Any]], ToolResult]]]:
    """The built-in tools by name, each with its function. The file tools are offered only
    when a root is allowed."""
    tools: dict[str, tuple[ToolSpec, Callable[[dict[str, Any]], ToolResult]]] = {
        CURRENT_TIME.name: (CURRENT_TIME, current_time)}
    if roots.folders:
        tools[READ_FILE.name] = (READ_FILE, lambda args: read_file(roots, args))
        tools[LIST_FOLDER.name] = (LIST_FOLDER, lambda args: list_folder(roots, args))
    return tools
