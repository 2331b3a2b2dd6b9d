"""`chatapp chat` end to end: the real TUI on a pseudo-terminal, and its start-up errors."""

from __future__ import annotations

import fcntl
import os
import pty
import select
import struct
import sys
import termios
from pathlib import Path

import numpy as np
from gguf import GGUFWriter

from chatapp.ui.widgets.composer import PLACEHOLDER

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
        while text not in self.screen:
            if not select.select([self.fd], [], [], timeout)[0]:
                raise AssertionError(f"no {text!r} on the screen within {timeout:g} s: {self.screen[-400:]!r}")
            try:
                self.screen += os.read(self.fd, 1 << 16)
            except OSError:  # the child has gone: the pty reads EIO
                raise AssertionError(f"chatapp exited before showing {text!r}: {self.screen[-400:]!r}") from None

    def exit_code(self, timeout: float = 30.0) -> int:
        """Read until the child exits; its exit status."""
        while select.select([self.fd], [], [], timeout)[0]:
            try:
                if not os.read(self.fd, 1 << 16):
                    break
            except OSError:
                break
        _, status = os.waitpid(self.pid, 0)
        os.close(self.fd)
        return os.waitstatus_to_exitcode(status)


def test_chat_opens_the_tui_on_the_default_model_and_ctrl_q_quits(isolated_dirs):
    terminal = Terminal()
    terminal.read_until(PLACEHOLDER[1:24].encode())  # its first cell carries the cursor
    assert b"smollm2-135m-instruct" in terminal.screen and b"Q4_1" in terminal.screen
    os.write(terminal.fd, CTRL_Q)
    assert terminal.exit_code() == 0


def test_chat_with_a_missing_model_is_one_line_exit_2(chatapp_exe):
    out = chatapp_exe("chat", "--model", "/nonexistent/model.gguf")
    assert out.returncode == 2
    assert "not found" in out.stderr and "Traceback" not in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1


def test_a_model_llama_cpp_refuses_while_the_ui_loads_is_one_line_exit_2(chatapp_exe, tmp_path):
    """A whole, well-formed GGUF whose architecture llama.cpp doesn't know: the header check
    passes, so the failure comes from the load that runs beside the UI imports."""
    path = tmp_path / "unknown-arch.gguf"
    writer = GGUFWriter(str(path), arch="no-such-arch")
    writer.add_tensor("weights", np.zeros(64, dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    out = chatapp_exe("chat", "--model", str(path))
    assert out.returncode == 2
    assert "llama.cpp could not load" in out.stderr and "Traceback" not in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1
