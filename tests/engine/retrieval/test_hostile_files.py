"""Hostile attachments: a PDF that inflates without end, a PDF pypdf complains about, a text file
that starts like a PDF, names that hold escape sequences, and an attach stopped part-way.
Each gets one line, nothing is attached half-way, and nothing else reaches the terminal."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from chatapp.engine.retrieval import pdf
from chatapp.engine.retrieval.attachments import AttachmentSet
from chatapp.engine.retrieval.cancel import AttachStopped, stoppable
from chatapp.engine.retrieval.loading import load_path
from tests.engine.retrieval.conftest import DOCS, make_bomb_pdf, make_pdf, pdf_readers
from tests.engine.retrieval.refusals import refused

SLOW_PDF_BYTES = 4 * 2**20
"""Within the inflate limit, and a minute or more of pypdf's time: an attach to stop."""


def when_reading_starts(then) -> threading.Thread:
    """A thread that waits for a PDF reader process to run, then calls `then()`."""
    def watch() -> None:
        deadline = time.monotonic() + 120
        while not pdf_readers() and time.monotonic() < deadline:
            time.sleep(0.02)
        then()

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread


def test_a_pdf_that_inflates_to_60_mb_is_refused_in_one_line(tmp_path, capfd):
    path = tmp_path / "bomb.pdf"
    path.write_bytes(make_bomb_pdf(60 * 10**6))
    assert path.stat().st_size < 300_000
    line = refused(path)
    assert line == "Attachment: bomb.pdf inflates past 32 MiB of PDF content; not attached"
    assert capfd.readouterr().err == "" and not pdf_readers()


def test_reading_a_pdf_is_bounded_in_time(tmp_path, monkeypatch):
    path = tmp_path / "slow.pdf"
    path.write_bytes(make_bomb_pdf(SLOW_PDF_BYTES))
    monkeypatch.setattr(pdf, "MAX_SECONDS", 1.0)
    assert refused(path) == "Attachment: slow.pdf took more than 1 s to read as a PDF; not attached"
    assert not pdf_readers()  # the reader was killed, not left running


def test_stopping_kills_the_pdf_reader_and_attaches_nothing(tmp_path):
    path = tmp_path / "slow.pdf"
    path.write_bytes(make_bomb_pdf(SLOW_PDF_BYTES))
    stop = threading.Event()
    watcher = when_reading_starts(stop.set)
    with stoppable(stop), pytest.raises(AttachStopped):
        load_path(path)
    watcher.join()
    assert not pdf_readers()


@pytest.fixture
def ctrl_c_raises():
    """Python's own Ctrl+C handler, as a run in a terminal has it: a test run started in the
    background inherits SIGINT ignored, and then Python raises no KeyboardInterrupt at all."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def test_ctrl_c_while_a_pdf_is_read_kills_the_reader(tmp_path, ctrl_c_raises):
    path = tmp_path / "slow.pdf"
    path.write_bytes(make_bomb_pdf(SLOW_PDF_BYTES))
    # A real SIGINT, as Ctrl+C sends: it wakes the main thread from its wait on the reader's pipe
    # (_thread.interrupt_main only sets a flag, seen once that wait ends by itself).
    watcher = when_reading_starts(lambda: os.kill(os.getpid(), signal.SIGINT))
    with pytest.raises(KeyboardInterrupt):
        load_path(path)
    watcher.join()
    assert not pdf_readers()


def test_ctrl_c_as_the_reader_starts_still_kills_it(tmp_path, ctrl_c_raises, monkeypatch):
    """The Ctrl+C lands after the reader's exec and before Popen returns, as it did under load in
    CI: the child nobody held yet must be killed all the same."""
    started = subprocess.Popen

    def popen_then_ctrl_c(*args, **kwargs):
        child = started(*args, **kwargs)
        os.kill(os.getpid(), signal.SIGINT)
        return child

    monkeypatch.setattr(pdf.subprocess, "Popen", popen_then_ctrl_c)
    path = tmp_path / "slow.pdf"
    path.write_bytes(make_bomb_pdf(SLOW_PDF_BYTES))
    with pytest.raises(KeyboardInterrupt):
        load_path(path)
    assert not pdf_readers()


def test_pypdf_warnings_never_reach_stderr(tmp_path, capfd):
    """A wrong startxref: pypdf logs "incorrect startxref pointer" and recovers."""
    data = make_pdf([["Heron staging notes"]])
    damaged = data[:data.rfind(b"startxref")] + b"startxref\n999\n%%EOF\n"
    (tmp_path / "notes.pdf").write_bytes(damaged)
    (attachment,) = load_path(tmp_path / "notes.pdf").attachments
    assert attachment.text == "Heron staging notes"
    (tmp_path / "broken.pdf").write_bytes(b"%PDF-1.7\n1 0 obj << /Type /Catalog >> garbage")
    assert "broken.pdf is not a readable PDF" in refused(tmp_path / "broken.pdf")
    assert capfd.readouterr().err == ""


def test_a_text_file_that_starts_like_a_pdf_is_read_as_text(tmp_path):
    path = tmp_path / "formats.txt"
    path.write_text("%PDF-1.7 is how every PDF file starts.\nZIP files start with PK.\n")
    loaded = load_path(path)
    (attachment,) = loaded.attachments
    assert attachment.kind == "text" and attachment.text.startswith("%PDF-1.7 is how")
    assert loaded.notices == ("formats.txt starts with %PDF- but is not a PDF with text; read as text",)
    # By its extension a .pdf is a PDF: one that is not is refused, not read as text.
    (tmp_path / "formats.pdf").write_bytes(path.read_bytes())
    assert "formats.pdf is not a readable PDF" in refused(tmp_path / "formats.pdf")


def test_names_with_escape_sequences_or_line_breaks_are_named_escaped(tmp_path):
    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "\x1b]0;title\x07.txt").write_text("The staging server is called heron.\n")
    (folder / "two\nlines.md").write_text("# Two\n\nlines\n")
    (folder / "bad\x1b[31m.bin").write_bytes(b"\x00" * 16)
    (folder / "empty\x1b[2J.txt").write_text("")
    loaded = load_path(folder)
    assert [a.name for a in loaded.attachments] == ["notes/\\x1b]0;title\\x07.txt", "notes/two\\nlines.md"]
    assert loaded.notices == ("skipped notes/empty\\x1b[2J.txt is empty", "skipped 1 binary file in notes")
    single = load_path(folder / "\x1b]0;title\x07.txt").attachments[0]
    assert single.name == "\\x1b]0;title\\x07.txt"
    line = refused(tmp_path / "gone\x1b]52;c;aGk=\x07.txt")
    assert "\x1b" not in line and "\x07" not in line and "gone\\x1b]52;c;aGk=\\x07.txt" in line


def test_stopping_while_sizing_leaves_the_set_as_it_was(count_tokens):
    stop = threading.Event()
    calls = 0

    def counting(text: str) -> int:
        nonlocal calls
        calls += 1
        if calls == 5:  # part-way through chunking: the user presses Esc
            stop.set()
        return count_tokens(text)

    attachments = AttachmentSet(counting, n_ctx=2048, reserve=512)
    with stoppable(stop), pytest.raises(AttachStopped):
        attachments.attach(DOCS / "typer.md")  # larger than a quarter of the context: chunked
    assert attachments.attachments == () and calls == 5
    report = attachments.attach(DOCS / "typer.md")  # not stopped: all of it
    assert [p.attachment.name for p in report.added] == ["typer.md"] and not report.added[0].whole


def test_a_pdf_reader_whose_parent_is_gone_ends_itself(tmp_path):
    """Ctrl+Q with a worker stuck in llama.cpp ends chatapp without waiting for its threads: a
    reader it started must not go on with pypdf at 100% CPU, as nobody is left to kill it."""
    import psutil

    path = tmp_path / "slow.pdf"
    path.write_bytes(make_bomb_pdf(SLOW_PDF_BYTES))
    script = (
        "import os, sys, threading, time\n"
        "from chatapp.engine.retrieval.loading import load_path\n"
        "from tests.engine.retrieval.conftest import pdf_readers\n"
        f"threading.Thread(target=load_path, args=({str(path)!r},), daemon=True).start()\n"
        "while not pdf_readers():\n"
        "    time.sleep(0.02)\n"
        "print(pdf_readers()[0].pid, flush=True)\n"
        "os._exit(0)\n")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                         cwd=Path(__file__).parents[3])
    reader = psutil.Process(int(out.stdout))
    try:
        reader.wait(timeout=30)
    except psutil.TimeoutExpired:
        reader.kill()
        raise AssertionError("the PDF reader went on after its parent had gone") from None


def test_one_reader_serves_a_folder_of_pdfs_past_the_bad_ones(tmp_path, monkeypatch):
    """A folder of PDFs starts Python and pypdf once, not once a file; a bomb, a damaged file and
    one past the time limit (its reader killed, another started) are skipped with a line each."""
    folder = tmp_path / "papers"
    folder.mkdir()
    (folder / "a.pdf").write_bytes(make_pdf([["Paper A on herons."]]))
    (folder / "b-bomb.pdf").write_bytes(make_bomb_pdf(60 * 10**6))
    (folder / "c-broken.pdf").write_bytes(b"%PDF-1.7\n1 0 obj << /Type /Catalog >> garbage")
    (folder / "d-slow.pdf").write_bytes(make_bomb_pdf(SLOW_PDF_BYTES))
    (folder / "e.pdf").write_bytes(make_pdf([["Paper E on egrets."]]))
    monkeypatch.setattr(pdf, "MAX_SECONDS", 1.0)
    started = []
    real_popen = subprocess.Popen
    monkeypatch.setattr(subprocess, "Popen", lambda *a, **k: started.append(a) or real_popen(*a, **k))
    loaded = load_path(folder)
    assert [a.name for a in loaded.attachments] == ["papers/a.pdf", "papers/e.pdf"]
    assert loaded.notices[0] == "skipped papers/b-bomb.pdf inflates past 32 MiB of PDF content; not attached"
    assert loaded.notices[1].startswith("skipped papers/c-broken.pdf is not a readable PDF")
    assert loaded.notices[2] == "skipped papers/d-slow.pdf took more than 1 s to read as a PDF; not attached"
    assert len(started) == 2 and not pdf_readers()  # one reader, and one more after the slow file's was killed
