"""A PDF's text through pypdf, page by page, with where each page starts."""

from __future__ import annotations

import io

from chatapp.errors import AttachmentError


def extract_text(name: str, data: bytes) -> tuple[str, tuple[int, ...]]:
    """The text of every page, pages separated by a blank line, and each page's first line.

    Raises AttachmentError for a damaged or encrypted PDF, and for one without extractable
    text (scanned pages are images; they need OCR, which chatapp does not do).
    """
    from pypdf import PdfReader  # only attaching a PDF pays for pypdf

    try:
        reader = PdfReader(io.BytesIO(data))
        if reader.is_encrypted and not reader.decrypt(""):
            raise AttachmentError(f"{name} is an encrypted PDF; save a copy without a password first")
        pages = [_clean(page.extract_text() or "") for page in reader.pages]
    except AttachmentError:
        raise
    except Exception as exc:  # noqa: BLE001 - pypdf raises many types (KeyError, ValueError, ...) on damaged files
        raise AttachmentError(f"{name} is not a readable PDF ({type(exc).__name__}: {exc})") from None
    if not any(page.strip() for page in pages):
        raise AttachmentError(f"{name} has no extractable text (scanned pages need OCR first)")
    starts, line = [], 1
    for page in pages:
        starts.append(line)
        line += page.count("\n") + 2  # the page's last line, then the blank separator line
    return "\n\n".join(pages), tuple(starts)


def _clean(page: str) -> str:
    lines = page.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    return "\n".join(line.rstrip() for line in lines).strip("\n")
