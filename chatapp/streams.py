"""Standard streams the CLI can trust: closed ones, full disks and readers that went away.

Python starts with `sys.stdout = None` when file descriptor 1 is closed (`>&-`), so every
print would vanish and the command would exit 0. And a write to /dev/full or to a pipe whose
reader has gone (`| head -1`) raises OSError wherever it happens, even at exit, as a
traceback. `guard_standard_streams` turns each of these into one `OutputError` the CLI can
report in one line (or, for a closed pipe, not at all).
"""

from __future__ import annotations

import errno
import io
import os
import sys

from chatapp.errors import OutputError


def output_error(exc: OSError) -> OutputError:
    broken = isinstance(exc, BrokenPipeError) or exc.errno == errno.EPIPE
    return OutputError(f"cannot write to standard output ({exc.strerror or exc})", broken_pipe=broken)


class ClosedOutput(io.TextIOBase):
    """What sys.stdout is when the process started with it closed: writing fails, out loud."""

    encoding = "utf-8"

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        raise OutputError("cannot write to standard output (it is closed)")

    def isatty(self) -> bool:
        return False


class GuardedOutput:
    """sys.stdout, with write failures raised as OutputError. After the first failure the real
    descriptor points at /dev/null, so the interpreter's final flush can't fail again."""

    def __init__(self, stream):
        self._stream = stream

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except OSError as exc:
            raise self._failed(exc) from None

    def flush(self) -> None:
        try:
            self._stream.flush()
        except OSError as exc:
            raise self._failed(exc) from None

    def _failed(self, exc: OSError) -> OutputError:
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, self._stream.fileno())
            os.close(devnull)
        except (OSError, ValueError):
            pass
        return output_error(exc)

    def __getattr__(self, name: str):
        return getattr(self._stream, name)


def _occupy_closed_descriptors() -> None:
    """Open /dev/null on a closed fd 0, 1 or 2, so the next file opened (the session database,
    a state file) can't get that number and receive what is printed."""
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            opened = os.open(os.devnull, os.O_RDWR)
            if opened != fd:  # a lower one was free after all; leave things as they were
                os.close(opened)


def guard_standard_streams() -> None:
    """Call once at the start of the CLI process."""
    stdout_closed = sys.stdout is None
    _occupy_closed_descriptors()
    if sys.stderr is None:
        sys.stderr = open(os.devnull, "w", encoding="utf-8")
    sys.stdout = ClosedOutput() if stdout_closed else GuardedOutput(sys.stdout)


def flush_stdout() -> None:
    """Flush now, while a failure can still be reported (not at interpreter exit)."""
    try:
        sys.stdout.flush()
    except OSError as exc:
        raise output_error(exc) from None
