"""What a killed `models pull` leaves in the models folder, and its removal at the next pull or start.

A pull writes the model to a hidden `.FILE.PID.RANDOM.part` file and unpacks each wheel in a
`.pull-PID-RANDOM` folder (chatapp.engine.models.pull); both go when the pull ends, unless the
process was killed (kill -9, a power cut). The PID in the name says whether the pull that
owns them is still running; names without one (left by older versions) are always leftovers.
"""

from __future__ import annotations

import os
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path

PULL_DIR = re.compile(r"^\.pull-(?:(?P<pid>\d+)-)?[a-z0-9_]+$")
"""tempfile's random part has no '-', so a leading number followed by '-' is the PID."""


def leftover_pid(name: str) -> tuple[bool, str | None]:
    """(is a pull's leftover, the PID of the pull that made it if the name says)."""
    if name.startswith(".") and name.endswith(".part"):
        parts = name.split(".")
        return True, parts[-3] if len(parts) >= 5 and parts[-3].isdigit() else None
    match = PULL_DIR.match(name)
    return (True, match["pid"]) if match else (False, None)


@dataclass
class Cleanup:
    removed: list[Path] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    """'PATH (reason)' for each leftover that could not be removed."""

    def notices(self) -> list[str]:
        lines = [f"removed {len(self.removed)} leftover(s) of an interrupted model pull"] if self.removed else []
        return lines + [f"cannot remove the leftover of an interrupted pull {problem}" for problem in self.failed]


def _running(pid: str | None) -> bool:
    if pid is None:
        return False
    if int(pid) == os.getpid():
        return True
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except (OSError, OverflowError, ValueError):
        return True  # it exists but isn't ours, or we can't tell: leave it
    return True


def clean_pull_leftovers(models_dir: Path) -> Cleanup:
    """Remove the `.part` files and `.pull-*` folders whose pull is no longer running."""
    cleanup = Cleanup()
    try:
        entries = list(os.scandir(models_dir))
    except OSError:
        return cleanup
    for entry in entries:
        leftover, pid = leftover_pid(entry.name)
        if not leftover or _running(pid):
            continue
        path = Path(entry.path)
        try:
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(path)
            else:
                path.unlink()
            cleanup.removed.append(path)
        except OSError as exc:
            cleanup.failed.append(f"{path} ({exc.strerror or exc})")
    return cleanup
