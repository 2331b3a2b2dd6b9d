"""`chatapp` driven in a real pseudo-terminal: keys in, the screen's bytes out."""

from __future__ import annotations

import contextlib
import fcntl
import os
import pty
import select
import signal
import struct
import sys
import termios
import time
from pathlib import Path


CTRL_Q = b"\x11"


class Terminal:
    """`chatapp` started on a pseudo-terminal of 120x40, as a user's terminal would run it."""

    def __init__(self, *args: str) -> None:
        exe = Path(sys.executable).with_name("chatapp")
        self.pid, self.fd = pty.fork()
        if self.pid == 0:
            fcntl.ioctl(0, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
            os.environ["TERM"] = "xterm-256color"
            os.execv(str(exe), [str(exe), *args])
        self.screen = b""

    def read_until(self, text: bytes, timeout: float = 60.0) -> None:
        """Read until `text` is on the screen; fail once `timeout` seconds have passed in all
        (the TUI redraws now and then, so a silence-only timeout could wait forever)."""
        deadline = time.monotonic() + timeout
        while text not in self.screen:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.fd], [], [], left)[0]:
                raise AssertionError(f"no {text!r} on the screen within {timeout:g} s: {self.screen[-400:]!r}")
            try:
                self.screen += os.read(self.fd, 1 << 16)
            except OSError:  # the child has gone: the pty reads EIO
                raise AssertionError(f"chatapp exited before showing {text!r}: {self.screen[-400:]!r}") from None

    def exit_code(self, timeout: float = 60.0) -> int:
        """Read until the child exits; its exit status. A child still running after `timeout`
        seconds in all is killed and the test fails with the screen's end: it waited on
        `os.waitpid` for good before, while the child, its screen no longer read, blocked on
        writing it (a 600 s timeout and a process left behind, under load in CI)."""
        deadline = time.monotonic() + timeout
        while True:
            done, status = os.waitpid(self.pid, os.WNOHANG)
            if done:
                break
            left = deadline - time.monotonic()
            if left <= 0:
                self.kill()
                raise AssertionError(f"chatapp did not exit within {timeout:g} s: {self.screen[-600:]!r}")
            if select.select([self.fd], [], [], min(left, 0.2))[0]:
                try:
                    self.screen += os.read(self.fd, 1 << 16)
                except OSError:  # the pty reads EIO once the child has gone: reap it next
                    time.sleep(0.05)
        while select.select([self.fd], [], [], 0)[0]:  # what it wrote last, before it went
            try:
                data = os.read(self.fd, 1 << 16)
            except OSError:
                break
            if not data:
                break
            self.screen += data
        os.close(self.fd)
        self.pid = 0
        return os.waitstatus_to_exitcode(status)

    def kill(self) -> None:
        """End the child if it still runs (a test that failed before it exited leaves none behind)."""
        if self.pid:
            with contextlib.suppress(ProcessLookupError, ChildProcessError):
                os.kill(self.pid, signal.SIGKILL)
                os.waitpid(self.pid, 0)
            with contextlib.suppress(OSError):
                os.close(self.fd)
            self.pid = 0

    def __del__(self) -> None:
        self.kill()
