"""Hostile attachments end to end through the installed script: Ctrl+Q while a worker is busy in
llama.cpp, Ctrl+C while `ask --attach` reads a PDF, a PDF bomb and a PDF pypdf complains about."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil

from chatapp.ui.widgets.composer import PLACEHOLDER
from tests.cli.terminal import CTRL_Q, Terminal
from tests.engine.retrieval.conftest import DOCS, make_bomb_pdf


def test_ctrl_q_while_an_attach_is_in_the_tokenizer_ends_chatapp(isolated_dirs, tmp_path):
    """8 MiB of text is one llama.cpp tokenizer call of several seconds, which nothing can
    interrupt: Ctrl+Q ends chatapp without waiting for it (it left a blank terminal that could
    not be ended), and says so."""
    big = tmp_path / "big.md"
    text = (DOCS / "typer.md").read_bytes()
    big.write_bytes((text * (8 * 2**20 // len(text) + 1))[:8 * 2**20 - 4096].decode(errors="ignore").encode())
    terminal = Terminal()
    terminal.read_until(PLACEHOLDER[1:24].encode())
    os.write(terminal.fd, f"/attach {big}".encode())
    terminal.read_until(b"/big.md")
    time.sleep(0.5)  # so that Enter comes alone, as a key, not at the end of a burst of typing
    os.write(terminal.fd, b"\r")
    terminal.read_until(b"attaching big.md")
    time.sleep(1.5)  # reading takes a fraction of that; then the worker is in the tokenizer
    os.write(terminal.fd, CTRL_Q)
    assert terminal.exit_code() == 0
    shown = terminal.screen.decode(errors="replace")
    assert "quit without waiting for a job still running in the model" in shown
    assert "Traceback" not in shown


def pdf_reader_of(pid: int) -> psutil.Process | None:
    for child in psutil.Process(pid).children(recursive=True):
        try:
            if "chatapp.engine.retrieval.pdf_child" in child.cmdline():
                return child
        except psutil.Error:
            continue
    return None


def test_ctrl_c_while_ask_reads_a_pdf_ends_it_and_its_reader(isolated_dirs, tmp_path):
    slow = tmp_path / "slow.pdf"
    slow.write_bytes(make_bomb_pdf(4 * 2**20))  # inside the inflate limit, a minute or more of pypdf
    exe = Path(sys.executable).with_name("chatapp")
    # SIGINT as a terminal's Ctrl+C leaves it, even where the test runner was started ignoring it.
    proc = subprocess.Popen([str(exe), "ask", "--attach", str(slow), "What does it say?"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, **isolated_dirs},
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 120
    while (reader := pdf_reader_of(proc.pid)) is None and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert reader is not None, proc.communicate(timeout=60)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert err == "chatapp: interrupted\n" and out == ""
    assert not reader.is_running() or reader.status() == psutil.STATUS_ZOMBIE


def test_a_pdf_bomb_and_a_pdf_pypdf_warns_about_are_one_line_each(chatapp_exe, tmp_path):
    bomb = tmp_path / "bomb.pdf"
    bomb.write_bytes(make_bomb_pdf(60 * 10**6))
    damaged = tmp_path / "damaged.pdf"  # a wrong startxref and no objects after it: pypdf logs, then fails
    damaged.write_bytes(b"%PDF-1.7\n1 0 obj << /Type /Catalog >> garbage\nstartxref\n999\n")
    cases = {bomb: "chatapp: Attachment: bomb.pdf inflates past 32 MiB of PDF content; not attached",
             damaged: "chatapp: Attachment: damaged.pdf is not a readable PDF"}
    for path, line in cases.items():
        out = chatapp_exe("ask", "--model", str(tmp_path / "no-model.gguf"), "--attach", str(path), "Hello?")
        assert out.returncode == 2 and out.stdout == "", out.stderr
        assert out.stderr.startswith(line) and len(out.stderr.splitlines()) == 1, out.stderr


def test_an_escape_sequence_in_a_file_name_never_reaches_stderr(chatapp_exe, tmp_path):
    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "\x1b]0;pwned\x07.txt").write_text("The staging server is called heron.\n")
    out = chatapp_exe("ask", "--attach", str(folder), "--temperature", "0", "--max-tokens", "4", "--ctx", "512",
                      "Which server?")
    assert out.returncode == 0, out.stderr
    assert "attached notes/\\x1b]0;pwned\\x07.txt" in out.stderr
    assert "\x1b" not in out.stderr and "\x07" not in out.stderr
    missing = chatapp_exe("ask", "--attach", str(tmp_path / "gone\x1b]52;c;aGk=\x07.md"), "Hello?")
    assert missing.returncode == 2 and "\x1b" not in missing.stderr and "gone\\x1b]52;c;aGk=\\x07.md" in missing.stderr
