"""Chunks at headings and paragraphs, sized with the default model's own tokenizer."""

from __future__ import annotations

import statistics

import pytest

from chatapp.engine.retrieval.chunking import MAX_TOKENS, MIN_TOKENS, chunk_attachment
from chatapp.engine.retrieval.document import Attachment
from chatapp.engine.retrieval.loading import load_path
from tests.engine.retrieval.conftest import DOCS

SLACK = 1.05
"""Chunks are packed on the sum of their parts' counts; joined text may count a few more."""


@pytest.fixture(scope="module")
def doc_chunks(count_tokens):
    return {a.name: (a, chunk_attachment(a, count_tokens)) for a in load_path(DOCS).attachments}


def test_chunks_are_exact_line_ranges_that_cover_every_line_once(doc_chunks, count_tokens):
    for attachment, chunks in doc_chunks.values():
        lines = attachment.text.split("\n")
        covered = []
        for chunk in chunks:
            assert chunk.text == "\n".join(lines[chunk.start_line - 1: chunk.end_line])
            assert chunk.tokens == count_tokens(chunk.text)
            assert (chunk.file, chunk.sha256) == (attachment.name, attachment.sha256)
            covered += range(chunk.start_line, chunk.end_line + 1)
        assert covered == sorted(set(covered))  # in order, no overlap
        text_lines = {n for n, line in enumerate(lines, 1) if line.strip()}
        assert text_lines <= set(covered)


def test_chunks_hold_about_200_to_400_tokens(doc_chunks):
    sizes = [c.tokens for _, chunks in doc_chunks.values() for c in chunks]
    assert max(sizes) <= MAX_TOKENS * SLACK
    assert MIN_TOKENS <= statistics.median(sizes) <= MAX_TOKENS
    # Only a document's first or last chunk, or one before a big block, may be small.
    assert sum(s < MIN_TOKENS for s in sizes) <= len(sizes) // 5


def test_sections_follow_markdown_and_rest_headings_but_not_code_comments(doc_chunks):
    def section_of(name, needle):
        return next(c.section for c in doc_chunks[name][1] if needle in c.text)

    assert section_of("docs/typer.md", "TYPER_USE_RICH") == "typer-slim"
    assert section_of("docs/llama-cpp-python.md", "expand the context window") == "Adjusting the Context Window"
    assert section_of("docs/psutil.rst", "psutil.sensors_battery()") == "Sensors"
    # Link syntax is dropped from a heading: "#  Python Bindings for [`llama.cpp`](https://...)".
    assert section_of("docs/llama-cpp-python.md", "Simple Python bindings") == "Python Bindings for llama.cpp"
    sections = {c.section for _, chunks in doc_chunks.values() for c in chunks}
    assert "Linux and Mac" not in sections  # `# Linux and Mac` is a comment inside a ```bash fence


def test_a_heading_starts_its_chunk(count_tokens):
    paragraph = " ".join(["The lighthouse keeper logs the weather every hour."] * 12)
    text = "\n\n".join(f"## Part {i}\n\n{paragraph}\n\n{paragraph}" for i in range(1, 5))
    chunks = chunk_attachment(Attachment.from_text("book.md", text), count_tokens)
    assert [c.section for c in chunks] == ["Part 1", "Part 2", "Part 3", "Part 4"]
    assert all(c.text.startswith(f"## {c.section}") for c in chunks)


def test_source_code_is_cut_at_blank_lines_and_has_no_headings(count_tokens):
    block = "\n".join(f"    total += values[{i}] * weights[{i}]  # accumulate term {i}" for i in range(12))
    text = "\n\n".join(f"# Section {i}: a comment, not a heading\ndef f{i}(values, weights):\n"
                       f"    total = 0\n{block}\n    return total" for i in range(8))
    chunks = chunk_attachment(Attachment.from_text("model.py", text), count_tokens)
    assert len(chunks) > 1
    assert {c.section for c in chunks} == {""}
    assert all(c.text.startswith("# Section") for c in chunks)


def test_an_over_long_line_is_cut_into_pieces_that_join_back(count_tokens):
    line = " ".join(f"token{i}" for i in range(2000))  # one minified line, about 6000 tokens
    attachment = Attachment.from_text("bundle.js", f"// header\n{line}\n// footer\n")
    chunks = chunk_attachment(attachment, count_tokens)
    pieces = [c for c in chunks if c.start_line == c.end_line == 2]
    assert len(pieces) > 5
    assert "".join(c.text for c in pieces) == line
    assert all(c.tokens <= MAX_TOKENS * 1.2 for c in pieces)


def test_pdf_chunks_name_their_page(count_tokens):
    pages = [[f"Page {p} line {i}: the quarterly figures for region {p} were revised." for i in range(30)]
             for p in range(1, 4)]
    text = "\n\n".join("\n".join(lines) for lines in pages)
    starts = (1, 32, 63)
    attachment = Attachment.from_text("report.pdf", text, kind="pdf", page_starts=starts)
    chunks = chunk_attachment(attachment, count_tokens)
    for chunk in chunks:
        page = attachment.page_of_line(chunk.start_line)
        assert chunk.section == f"page {page}"
        assert chunk.text.split("\n")[0].startswith(f"Page {page} ")


def test_smaller_chunk_sizes_for_a_small_context(count_tokens, doc_chunks):
    attachment, _ = doc_chunks["docs/rich.md"]
    chunks = chunk_attachment(attachment, count_tokens, min_tokens=60, max_tokens=120)
    assert max(c.tokens for c in chunks) <= 120 * 1.2
    assert statistics.median(c.tokens for c in chunks) >= 60
