"""Running a script in new user and mount namespaces (a full disk, a read-only folder)."""

from __future__ import annotations

import shutil
import subprocess

import pytest


def namespace_run(script: str, env: dict) -> subprocess.CompletedProcess:
    """Run `script` as root of new user and mount namespaces, where it may mount a tmpfs or a
    read-only bind; the rest of the system is untouched."""
    if shutil.which("unshare") is None or subprocess.run(["unshare", "-rm", "true"]).returncode != 0:
        pytest.skip("needs user namespaces (unshare -rm) to mount a full or read-only folder")
    return subprocess.run(["unshare", "-rm", "bash", "-c", f"set -e\n{script}"], capture_output=True, text=True,
                          env=env, timeout=300)
