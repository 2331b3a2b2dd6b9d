"""The child process that reads PDFs' text with pypdf; chatapp.engine.retrieval.pdf starts it
(`python -m chatapp.engine.retrieval.pdf_child MAX_INFLATED MAX_TEXT MAX_SECONDS PARENT_PID`) and
says why it is a child.

It serves one PDF after another, so that a folder of them starts Python and pypdf once: each
request on stdin is an 8-byte big-endian length and the PDF's bytes; each answer on stdout is
the same framing around one JSON object, {"pages": [text, ...]} or {"error": KIND, "detail":
"..."} with KIND one of "encrypted", "inflates", "text", "unreadable". It ends at the end of its
input. Its stderr goes nowhere, and pypdf's warnings (logging and warnings) with it.

It also ends itself once its parent has gone or one PDF has taken MAX_SECONDS: the parent kills
it in either case, but a parent that exits at once (Ctrl+Q with a worker stuck in llama.cpp
ends the process without waiting) cannot, and pypdf would go on at 100% CPU for as long as it
liked.
"""

from __future__ import annotations

import io
import json
import os
import struct
import sys
import threading
import time
from contextlib import nullcontext

WATCH_SECONDS = 0.25
FRAME = struct.Struct(">Q")

_busy_since: float | None = None
"""When the PDF being read was received; None between requests."""


def _limits(max_inflated: int):
    """pypdf's own per-stream limits, lowered to ours, so that no single stream is inflated past
    the budget before it is counted (pypdf 7's Configuration; older ones keep their 75 MB)."""
    try:
        from pypdf import apply_configuration
    except ImportError:
        return nullcontext()
    return apply_configuration(
        zlib_maximum_output_length=max_inflated, lzw_maximum_output_length=max_inflated,
        run_length_maximum_output_length=max_inflated, brotli_maximum_output_length=max_inflated,
        array_based_stream_maximum_output_length=max_inflated)


def _limit_reached(exc: BaseException) -> bool:
    return type(exc).__name__ == "LimitReachedError"  # pypdf >= 6.1; named so that older ones still load


def read(data: bytes, max_inflated: int, max_text: int) -> dict:
    from pypdf import PdfReader

    with _limits(max_inflated):
        try:
            reader = PdfReader(io.BytesIO(data))
            if reader.is_encrypted and not reader.decrypt(""):
                return {"error": "encrypted"}
            pages, inflated, text_bytes = [], 0, 0
            for page in reader.pages:
                contents = page.get_contents()
                # What the page's text is parsed from: counted before it is parsed, since pypdf's
                # extraction slows down faster than the content grows.
                inflated += len(contents.get_data()) if contents is not None else 0
                if inflated > max_inflated:
                    return {"error": "inflates"}
                text = page.extract_text() or ""
                # Lone surrogates from a broken font map would fail later, in the tokenizer or SQLite.
                text = text.encode("utf-8", "replace").decode("utf-8")
                text_bytes += len(text.encode("utf-8"))
                if text_bytes > max_text:
                    return {"error": "text"}
                pages.append(text)
        except Exception as exc:  # noqa: BLE001 - pypdf raises many types (KeyError, ValueError, ...) on damaged files
            if _limit_reached(exc):
                return {"error": "inflates"}
            return {"error": "unreadable", "detail": f"{type(exc).__name__}: {exc}"[:300]}
    return {"pages": pages}


def _watch(seconds: float, parent: int) -> None:
    """End this process once `parent` has gone (this is then another's child) or one PDF has
    taken `seconds`. The parent passes its pid: it may be gone before this process gets here."""

    def watch() -> None:
        while os.getppid() == parent:
            started = _busy_since
            if started is not None and time.monotonic() - started > seconds:
                break
            time.sleep(WATCH_SECONDS)
        os._exit(3)

    threading.Thread(target=watch, name="pdf-watch", daemon=True).start()


def _read_exactly(stream, n: int) -> bytes | None:
    chunks, left = [], n
    while left:
        chunk = stream.read(left)
        if not chunk:
            return None
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def main() -> None:
    global _busy_since
    max_inflated, max_text, max_seconds, parent = (int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]),
                                                    int(sys.argv[4]))
    _watch(max_seconds, parent)
    requests, answers = sys.stdin.buffer, sys.stdout.buffer
    while (head := _read_exactly(requests, FRAME.size)) is not None:
        data = _read_exactly(requests, FRAME.unpack(head)[0])
        if data is None:
            return
        _busy_since = time.monotonic()
        answer = json.dumps(read(data, max_inflated, max_text)).encode()
        _busy_since = None
        answers.write(FRAME.pack(len(answer)) + answer)
        answers.flush()


if __name__ == "__main__":
    main()
