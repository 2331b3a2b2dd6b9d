"""chatapp in a real terminal for the tests: a tmux window on a private server, typed into with
the byte sequences terminals send, and read back (after benchmarks/terminal.py)."""

from __future__ import annotations

import itertools
import os
import shlex
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

CHATAPP = str(Path(sys.executable).with_name("chatapp"))
_numbers = itertools.count()


class Tmux:
    def __init__(self, env: dict[str, str], args: list[str], width: int = 160, height: int = 40) -> None:
        # A server of its own (a socket path must stay short) and one session on it.
        self.socket, self.name = f"chatapp-test-{os.getpid()}-{next(_numbers)}", "chat"
        # COLUMNS and LINES from the test process would override the window's size in the app.
        line = " ".join(shlex.quote(p) for p in ["env", "-u", "COLUMNS", "-u", "LINES",
                                                 *(f"{k}={v}" for k, v in env.items()), CHATAPP, *args])
        self.run("new-session", "-d", "-s", self.name, "-x", str(width), "-y", str(height), line)

    def run(self, *args: str) -> str:
        return subprocess.run(["tmux", "-L", self.socket, *args], capture_output=True, text=True, check=True).stdout

    def screen(self) -> str:
        return self.run("capture-pane", "-p", "-t", self.name)

    def keys(self, *keys: str) -> None:
        """tmux key names (M-e, Enter, C-u): the bytes tmux sends for them, as a user's terminal would."""
        for key in keys:
            self.run("send-keys", "-t", self.name, key)
            time.sleep(0.15)

    def raw(self, data: str) -> None:
        """Bytes as they are, e.g. a kitty-protocol key report."""
        self.run("send-keys", "-t", self.name, "-l", data)
        time.sleep(0.15)

    def type(self, text: str) -> None:
        self.run("send-keys", "-t", self.name, "-l", text)

    def wait_for(self, text: str, timeout: float = 60.0) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            shown = self.screen()
            if text in shown:
                return shown
            time.sleep(0.1)
        raise AssertionError(f"{text!r} did not appear within {timeout:g} s:\n{self.screen()}")

    def wait_gone(self, text: str, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while text in self.screen():
            if time.monotonic() > deadline:
                raise AssertionError(f"{text!r} still shown after {timeout:g} s:\n{self.screen()}")
            time.sleep(0.1)

    def close(self) -> None:
        subprocess.run(["tmux", "-L", self.socket, "kill-server"], capture_output=True)


@contextmanager
def chat_after_one_turn(env: dict[str, str], width: int = 160, height: int = 40) -> Iterator[Tmux]:
    """chatapp in tmux (in `env`'s isolated folders) on 2 threads, greedy, 8 tokens a reply, after
    one turn ("Name a colour.")."""
    config = Path(env["XDG_CONFIG_HOME"]) / "chatapp" / "config.toml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text("threads = 2\ntemperature = 0.0\nmax_tokens = 8\n")
    term = Tmux(dict(env), ["--ctx", "1024"], width=width, height=height)
    try:
        term.wait_for("KV cache", 60)
        term.type("Name a colour.")
        term.keys("Enter")
        term.wait_for("this turn wrote", 120)
        yield term
    finally:
        term.close()
