"""Programs in a real terminal: tmux sessions on a private tmux server, typed into and read back.

Shared by the benchmarks that measure chatapp as a user gets it. Each session runs one
command in a window of a fixed size; the pane stays after the command exits, so its output
can still be read.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import time
from pathlib import Path

SOCKET = "chatapp-bench"


def fresh_home(home: Path, model: Path, config: str) -> dict[str, str]:
    """The environment of a chatapp whose XDG folders are in `home` (a new user's), its config file
    holding `config` and its model `model`; this checkout's chatapp (PYTHONPATH), since a shared
    tmux server keeps the environment it started with."""
    path = home / "config" / "chatapp" / "config.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(config)
    env = {"XDG_CONFIG_HOME": str(home / "config"), "XDG_DATA_HOME": str(home / "data"),
           "XDG_CACHE_HOME": str(home / "cache"), "CHATAPP_MODEL": str(model), "TERM": "xterm-256color"}
    if os.environ.get("PYTHONPATH"):
        env["PYTHONPATH"] = os.environ["PYTHONPATH"]
    return env


def tmux(*args: str, check: bool = True) -> str:
    done = subprocess.run(["tmux", "-L", SOCKET, *args], capture_output=True, text=True)
    if check and done.returncode != 0:
        raise RuntimeError(f"tmux {' '.join(args)}: {done.stderr.strip()}")
    return done.stdout


def cpu_seconds(tid_path: Path) -> float:
    """User + system CPU of one thread (or process), from /proc/.../stat."""
    fields = tid_path.read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Terminal:
    """One command in a tmux window of `width` x `height`."""

    def __init__(self, name: str, command: list[str], env: dict[str, str] | None = None,
                 width: int = 160, height: int = 50) -> None:
        self.name = name
        tmux("start-server", check=False)
        tmux("set-option", "-g", "remain-on-exit", "on", check=False)
        tmux("kill-session", "-t", name, check=False)
        exports = [f"{k}={v}" for k, v in (env or {}).items()]
        line = " ".join(shlex.quote(part) for part in ["env", *exports, *command])
        for last_try in (False, True):
            try:
                tmux("new-session", "-d", "-s", name, "-x", str(width), "-y", str(height), line)
                break
            except RuntimeError as error:
                # A server with no sessions left exits; a new session asked of it as it goes fails
                # with "server exited unexpectedly". A second try starts a fresh server.
                if last_try or "exited unexpectedly" not in str(error):
                    raise
        tmux("set-option", "-t", name, "remain-on-exit", "on", check=False)
        self.pid = int(tmux("display-message", "-p", "-t", name, "#{pane_pid}").strip())

    def screen(self, history: bool = False) -> str:
        args = ["capture-pane", "-p", "-t", self.name] + (["-S", "-100000"] if history else [])
        return tmux(*args)

    def wait_for(self, text: str, timeout: float, history: bool = False) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            shown = self.screen(history)
            if text in shown:
                return shown
            time.sleep(0.1)
        raise TimeoutError(f"{self.name}: {text!r} did not appear within {timeout:g} s:\n{self.screen()}")

    def type(self, text: str) -> None:
        """Keys as typed, one at a time (no bracketed paste)."""
        tmux("send-keys", "-t", self.name, "-l", text)

    def paste(self, text: str) -> None:
        """A bracketed paste, as a terminal sends a clipboard paste."""
        tmux("set-buffer", "-b", self.name, text)
        tmux("paste-buffer", "-p", "-d", "-b", self.name, "-t", self.name)

    def keys(self, *keys: str) -> None:
        tmux("send-keys", "-t", self.name, *keys)

    @property
    def alive(self) -> bool:
        return tmux("display-message", "-p", "-t", self.name, "#{pane_dead}", check=False).strip() == "0"

    def wait_exit(self, timeout: float) -> float:
        """Seconds until the command exits (raises if it does not)."""
        start = time.monotonic()
        while self.alive:
            if time.monotonic() - start > timeout:
                raise TimeoutError(f"{self.name} still runs after {timeout:g} s")
            time.sleep(0.02)
        return time.monotonic() - start

    def thread_cpu(self) -> dict[int, float]:
        """CPU seconds of each thread of the command's process, by thread id."""
        found = {}
        for task in Path(f"/proc/{self.pid}/task").iterdir():
            try:
                found[int(task.name)] = cpu_seconds(task / "stat")
            except (OSError, ValueError, IndexError):
                continue
        return found

    def close(self) -> None:
        tmux("kill-session", "-t", self.name, check=False)
