"""The real default model's tokenizer, and small files to attach."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from chatapp.engine.local.llama import LlamaRuntime, LoadOptions

DOCS = Path(__file__).parents[2] / "data" / "retrieval" / "docs"


@pytest.fixture(scope="session")
def tokenizer_runtime(default_model_path):
    """The default model with a tiny context: these tests only tokenize with it."""
    runtime = LlamaRuntime(default_model_path, LoadOptions(n_ctx=256))
    yield runtime
    runtime.close()


@pytest.fixture(scope="session")
def count_tokens(tokenizer_runtime):
    return lambda text: len(tokenizer_runtime.tokenize(text, special=False, add_bos=False))


def make_pdf(pages: list[list[str]]) -> bytes:
    """A PDF with one page per list of lines (Helvetica text); an empty list is a blank page."""
    from pypdf import PdfWriter
    from pypdf.generic import DecodedStreamObject, DictionaryObject, NameObject

    writer = PdfWriter()
    for lines in pages:
        page = writer.add_blank_page(612, 792)
        if not lines:
            continue
        ops = ["BT", "/F1 12 Tf", "14 TL", "72 720 Td"]
        ops += ["(" + line.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)") + ") Tj T*" for line in lines]
        ops.append("ET")
        stream = DecodedStreamObject()
        stream.set_data("\n".join(ops).encode("latin-1"))
        font = DictionaryObject({NameObject("/Type"): NameObject("/Font"), NameObject("/Subtype"): NameObject("/Type1"),
                                 NameObject("/BaseFont"): NameObject("/Helvetica")})
        fonts = DictionaryObject({NameObject("/F1"): font})
        page[NameObject("/Resources")] = DictionaryObject({NameObject("/Font"): fonts})
        page.replace_contents(stream)
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def make_bomb_pdf(inflated: int) -> bytes:
    """One page whose one content stream, FlateDecode-compressed, inflates to about `inflated`
    bytes of the same line of text operators: 60 MB of it is a file of about 200 KB."""
    from pypdf import PdfWriter
    from pypdf.generic import DecodedStreamObject, DictionaryObject, NameObject

    writer = PdfWriter()
    page = writer.add_blank_page(612, 792)
    line = b"(All work and no play makes Jack a dull boy) Tj T*\n"
    stream = DecodedStreamObject()
    stream.set_data(b"BT /F1 12 Tf 14 TL 72 720 Td\n" + line * (inflated // len(line)) + b"ET")
    font = DictionaryObject({NameObject("/Type"): NameObject("/Font"), NameObject("/Subtype"): NameObject("/Type1"),
                             NameObject("/BaseFont"): NameObject("/Helvetica")})
    fonts = DictionaryObject({NameObject("/F1"): font})
    page[NameObject("/Resources")] = DictionaryObject({NameObject("/Font"): fonts})
    page.replace_contents(stream.flate_encode(level=9))
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def pdf_readers() -> list:
    """The PDF reader processes (chatapp.engine.retrieval.pdf_child) this process has running."""
    import psutil

    found = []
    for child in psutil.Process().children(recursive=True):
        try:
            if "chatapp.engine.retrieval.pdf_child" in child.cmdline() and child.status() != psutil.STATUS_ZOMBIE:
                found.append(child)
        except psutil.Error:  # it ended while we looked
            continue
    return found
