"""What the server's CLI tests share: the API key, and reading a one-line error."""

from __future__ import annotations


SECRET = "s3cret-key-0123456789"


def one_line(stderr: str) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in stderr, stderr
    return lines[0]
