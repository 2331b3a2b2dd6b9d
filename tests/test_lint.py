"""The tree keeps the ruff rules pyproject.toml selects, and no `# noqa` outlives its rule."""

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).parent.parent


def test_ruff_finds_nothing():
    ruff = Path(sys.executable).with_name("ruff")
    out = subprocess.run([str(ruff), "check", "--no-cache", "chatapp", "tests", "benchmarks"], capture_output=True,
                         text=True, cwd=REPO)
    assert out.returncode == 0, out.stdout + out.stderr
