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
