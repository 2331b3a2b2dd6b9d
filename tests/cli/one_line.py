"""What the CLI's refusals have in common: one line on stderr, never a traceback."""

from __future__ import annotations

import subprocess


def one_line(out: subprocess.CompletedProcess) -> str:
    """The single line a refused command printed on stderr (failing on a traceback or more lines)."""
    assert "Traceback" not in out.stderr, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    return lines[0]
