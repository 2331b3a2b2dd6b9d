"""A PDF's text through pypdf, page by page, with where each page starts.

pypdf runs in a child process (chatapp.engine.retrieval.pdf_child), because it is pure Python
and a hostile file can keep it busy for as long as it likes: a 200 KB PDF whose one content
stream inflates to 60 MB kept it at 100% CPU for 18 minutes, and a thread cannot be
interrupted, so neither Esc, Ctrl+C nor Ctrl+Q could end it. A process can be killed. So the
reading is bounded three ways: content streams may inflate to MAX_INFLATED_BYTES in all (the
child counts, and lowers pypdf's own per-stream limits to the same), the text may be at most
MAX_TEXT_BYTES, and the child is killed after MAX_SECONDS, or as soon as the attach is stopped
(chatapp.engine.retrieval.cancel) or Ctrl+C interrupts the caller. Its stderr is thrown away,
so pypdf's warnings never print before chatapp's one line; refusals say why in that line. One
child serves all the PDFs of one attach (`Reader`).
"""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from chatapp.engine.retrieval import cancel
from chatapp.engine.retrieval.pdf_child import FRAME
from chatapp.errors import AttachmentError
from chatapp.format import one_line_text

MAX_INFLATED_BYTES = 32 * 2**20
"""Content streams of real documents are a few times their text: a 1,000-page book is ~20 MB."""
MAX_TEXT_BYTES = 8 * 2**20
"""As for a text file (chatapp.engine.retrieval.loading.MAX_TEXT_BYTES)."""
MAX_SECONDS = 60.0
POLL_SECONDS = 0.1
"""How often the wait looks at the stop flag and the clock."""


class NotAPDFError(AttachmentError):
    """pypdf could not make a document of the bytes (a text file may start with "%PDF-")."""


class NoTextError(AttachmentError):
    """A PDF without extractable text."""


def extract_text(name: str, data: bytes, reader: Reader | None = None) -> tuple[str, tuple[int, ...]]:
    """The text of every page, pages separated by a blank line, and each page's first line.
    `reader`: the reader process of the attach this file belongs to (one is started otherwise).

    Raises AttachmentError: NotAPDFError for bytes pypdf cannot read, NoTextError for a PDF
    without extractable text (scanned pages are images; they need OCR, which chatapp does not
    do), AttachStopped when the attach is stopped, and one line for an encrypted PDF or one
    past a limit. KeyboardInterrupt passes through, with the reader killed.
    """
    shown = one_line_text(name)
    if reader is None:
        with Reader() as own:
            result = own.read(shown, data)
    else:
        result = reader.read(shown, data)
    error = result.get("error")
    if error == "encrypted":
        raise AttachmentError(f"{shown} is an encrypted PDF; save a copy without a password first")
    if error == "inflates":
        raise AttachmentError(f"{shown} inflates past {MAX_INFLATED_BYTES // 2**20} MiB of PDF content; "
                              "not attached")
    if error == "text":
        raise AttachmentError(f"{shown} holds more than {MAX_TEXT_BYTES // 2**20} MiB of text; "
                              "attach a smaller PDF")
    if error is not None or not isinstance(result.get("pages"), list):
        detail = one_line_text(str(result.get("detail") or "the reader gave no answer"))
        raise NotAPDFError(f"{shown} is not a readable PDF ({detail})")
    pages = [_clean(str(page)) for page in result["pages"]]
    if not any(page.strip() for page in pages):
        raise NoTextError(f"{shown} has no extractable text (scanned pages need OCR first)")
    starts, line = [], 1
    for page in pages:
        starts.append(line)
        line += page.count("\n") + 2  # the page's last line, then the blank separator line
    return "\n\n".join(pages), tuple(starts)


class Reader:
    """One reader process (pdf_child) serving the PDFs of one attach in turn, so that a folder of
    them starts Python and pypdf once (about 0.2 s each time here). Started on first use, started
    again after it was killed, ended by `close` (or the `with` block)."""

    def __init__(self) -> None:
        self._child: subprocess.Popen | None = None
        self._answers: queue.Queue[bytes | None] | None = None

    def __enter__(self) -> Reader:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def read(self, shown: str, data: bytes) -> dict:
        """The child's answer for one PDF; kills it past MAX_SECONDS, on a stop or on Ctrl+C."""
        deadline = time.monotonic() + MAX_SECONDS
        try:  # a Ctrl+C at any point, the start and the write included, kills the child
            child, answers = self._started(shown)
            try:
                child.stdin.write(FRAME.pack(len(data)))
                child.stdin.write(data)
                child.stdin.flush()
            except OSError:  # it died before reading it all
                return self._stopped()
            while True:
                try:
                    answer = answers.get(timeout=POLL_SECONDS)
                    break
                except queue.Empty:
                    cancel.check()
                    if time.monotonic() > deadline:
                        raise AttachmentError(f"{shown} took more than {MAX_SECONDS:.0f} s to read as a PDF; "
                                              "not attached") from None
        except BaseException:
            self._kill()
            raise
        if answer is None:
            return self._stopped()
        try:
            result = json.loads(answer)
        except ValueError:
            return {"error": "unreadable", "detail": "the PDF reader's answer was cut short"}
        return result if isinstance(result, dict) else {"error": "unreadable"}

    def close(self) -> None:
        """End the child: at the end of its input it exits; one that does not is killed."""
        child, self._child = self._child, None
        if child is None:
            return
        try:
            child.stdin.close()
            child.wait(timeout=1)
        except (OSError, subprocess.TimeoutExpired):
            child.kill()
            child.wait()

    def _started(self, shown: str) -> tuple[subprocess.Popen, queue.Queue[bytes | None]]:
        if self._child is not None and self._child.poll() is None and self._answers is not None:
            return self._child, self._answers
        command, env = _child_command()
        answers: queue.Queue[bytes | None] = queue.Queue()
        with _ctrl_c_held():
            try:
                child = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         stderr=subprocess.DEVNULL, env=env)
            except OSError as exc:
                raise AttachmentError(f"{shown}: cannot start the PDF reader ({exc.strerror or exc})") from None
            self._child, self._answers = child, answers  # from here a Ctrl+C kills it
        # A thread reads the answers, so the wait for one can look at the stop and the clock on
        # every platform (select() takes no pipes on Windows).
        threading.Thread(target=_read_answers, args=(child.stdout, answers), name="pdf-answers", daemon=True).start()
        return child, answers

    def _stopped(self) -> dict:
        child, self._child = self._child, None
        code = child.wait() if child is not None else None
        return {"error": "unreadable", "detail": f"the PDF reader stopped (exit status {code})"}

    def _kill(self) -> None:
        child, self._child = self._child, None
        if child is not None and child.poll() is None:
            child.kill()
            child.wait()


@contextmanager
def _ctrl_c_held() -> Iterator[None]:
    """Ctrl+C held back while the reader starts, and raised once it is recorded. A Ctrl+C that
    lands inside Popen, after the exec and before Popen returns, would leave a child that nothing
    holds and so nothing kills (seen under load in CI). Only the main thread gets Ctrl+C, and
    only Python's own handler is held back: one a caller installed stays as it is."""
    if (threading.current_thread() is not threading.main_thread()
            or signal.getsignal(signal.SIGINT) is not signal.default_int_handler):
        yield
        return
    pressed: list[int] = []
    signal.signal(signal.SIGINT, lambda signum, frame: pressed.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)
        if pressed:
            raise KeyboardInterrupt


def _read_answers(stream, answers: queue.Queue[bytes | None]) -> None:
    """Each framed answer of one child, then None once its output ends."""
    try:
        while len(head := stream.read(FRAME.size)) == FRAME.size:
            body = stream.read(FRAME.unpack(head)[0])
            answers.put(body)
    except (OSError, ValueError):  # the pipe closed under it
        pass
    answers.put(None)


def _child_command() -> tuple[list[str], dict[str, str]]:
    """This interpreter on pdf_child, finding this chatapp first: -P keeps the working folder
    (where a stray pypdf.py or chatapp/ could be) off sys.path, PYTHONPATH puts this one on."""
    root = str(Path(__file__).resolve().parents[3])
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, (root, env.get("PYTHONPATH"))))
    command = [sys.executable, "-P", "-m", "chatapp.engine.retrieval.pdf_child",
               str(MAX_INFLATED_BYTES), str(MAX_TEXT_BYTES), str(MAX_SECONDS + 1), str(os.getpid())]
    return command, env


def _clean(page: str) -> str:
    lines = page.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    return "\n".join(line.rstrip() for line in lines).strip("\n")
