"""`chatapp chat` end to end: the real TUI on a pseudo-terminal, and its start-up errors."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import numpy as np
from gguf import GGUFWriter

from chatapp.ui.widgets.composer import PLACEHOLDER
from tests.cli.terminal import CTRL_Q, Terminal


def test_chat_opens_the_tui_on_the_default_model_and_ctrl_q_quits(isolated_dirs):
    terminal = Terminal()
    terminal.read_until(PLACEHOLDER[1:24].encode())  # its first cell carries the cursor
    assert b"smollm2-135m-instruct" in terminal.screen and b"Q4_1" in terminal.screen
    os.write(terminal.fd, CTRL_Q)
    assert terminal.exit_code() == 0


def test_chat_continue_opens_the_session_used_last(chatapp_exe):
    for name, question in (("older", "What is 2 plus 2?"), ("newer", "Name a colour.")):
        out = chatapp_exe("ask", "--session", name, "-n", "4", "--threads", "1", question)
        assert out.returncode == 0, out.stderr
    terminal = Terminal("chat", "--continue")
    terminal.read_until(b"Name a colour.")
    assert b"What is 2 plus 2?" not in terminal.screen
    os.write(terminal.fd, CTRL_Q)
    assert terminal.exit_code() == 0


def test_chat_with_a_missing_model_is_one_line_exit_2(isolated_dirs):
    terminal = Terminal("chat", "--model", "/nonexistent/model.gguf")
    assert terminal.exit_code() == 2
    shown = terminal.screen.decode()
    assert "not found" in shown and "Traceback" not in shown
    assert len(shown.strip().splitlines()) == 1


def test_chat_without_a_terminal_says_so_and_points_to_ask(chatapp_exe):
    """stdin from /dev/null, stdout to a pipe: one line and exit 2, at once (it spun for minutes)."""
    for args in ((), ("chat",)):
        out = chatapp_exe(*args)
        assert out.returncode == 2, out.stderr
        assert "needs a terminal" in out.stderr and "chatapp ask" in out.stderr
        assert len(out.stderr.strip().splitlines()) == 1 and out.stdout == ""


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
    terminal = Terminal("chat", "--model", str(path))
    assert terminal.exit_code() == 2
    shown = terminal.screen.decode()
    assert "llama.cpp could not load" in shown and "Traceback" not in shown
    assert len(shown.strip().splitlines()) == 1


def test_ctrl_c_during_a_long_prefill_stops_ask_and_keeps_the_turn(isolated_dirs, tmp_path):
    """SIGINT while llama.cpp reads a ~3,000-token prompt: the turn ends "stopped" with what was
    prefilled, and the session keeps it, rather than waiting for the whole prompt."""
    import json
    import signal
    import subprocess

    from chatapp.engine.sessions import SessionManager
    from chatapp.config import Settings

    exe = Path(sys.executable).with_name("chatapp")
    prompt = " ".join(f"Line {i}: the keeper trimmed the wick and wrote in the log." for i in range(170))
    proc = subprocess.Popen([str(exe), "ask", "--json", "--session", "long", "--temperature", "0", prompt],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, **isolated_dirs})
    time.sleep(0.2)
    deadline = time.monotonic() + 60
    while not list((tmp_path / "data").rglob("sessions.db")) and time.monotonic() < deadline:
        time.sleep(0.05)  # the session database is opened before the model loads
    time.sleep(1.5)  # the model loads in well under a second; the prefill takes several
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130 and err.endswith("chatapp: interrupted\n"), err  # kept, and said interrupted
    record = json.loads(out.splitlines()[-1])
    assert record["finish_reason"] == "stopped"
    assert record["generated_tokens"] == 0 and record["prefill_tokens"] < record["prompt_tokens"]
    assert "Traceback" not in err and "stopping" in err
    stored = SessionManager.open(Settings(), tmp_path / "data" / "chatapp" / "sessions").store.get("long")
    assert [m.role for m in stored.messages][-2:] == ["user", "assistant"] and stored.messages[-1].stopped


def test_chat_system_on_a_saved_session_replaces_its_system_prompt(chatapp_exe):
    from chatapp.config import Settings
    from chatapp.engine.sessions import SessionManager

    out = chatapp_exe("ask", "--session", "s", "--temperature", "0", "--max-tokens", "8", "Name a colour.")
    assert out.returncode == 0, out.stderr
    terminal = Terminal("chat", "--session", "s", "--system", "You are a pirate.")
    # The notice's start: its end wraps wherever the transcript's width puts it ("the system prompt
    # changed" was cut in two when the panels drew first).
    terminal.read_until(b"saved KV state not used")
    os.write(terminal.fd, CTRL_Q)
    assert terminal.exit_code() == 0
    stored = SessionManager.open(Settings(), create=False).store.get("s")
    assert stored.system_prompt == "You are a pirate."
    assert [m.content for m in stored.messages if m.role == "user"] == ["Name a colour."]
