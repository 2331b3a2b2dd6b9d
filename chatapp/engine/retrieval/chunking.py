"""Cutting an attachment into chunks of roughly 200-400 tokens at headings and paragraphs.

The text is first cut into units: headings (Markdown `#` and underlined Markdown/reST titles),
fenced code blocks, and paragraphs (runs of non-blank lines). Units are then packed in order
into chunks of at most `max_tokens`, counted with the model's own tokenizer. A heading starts a
new chunk once the current one holds `min_tokens`, so small sections join their neighbour
instead of becoming scraps, and a heading never ends a chunk: it moves to the chunk it titles.
A unit larger than `max_tokens` is cut at its lines, and a single line larger than that (a
minified file) into pieces of about `max_tokens`.

A chunk's text is the attachment's text from `start_line` to `end_line` (1-based, inclusive),
blank lines included, so its position can be cited and checked; only a piece of an over-long
line is less than whole lines.

Source code has no headings: a `#` line there is a comment, so files other than prose
(Markdown, reST, plain text, PDF) are cut at blank lines only.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import PurePosixPath

from chatapp.engine.retrieval.document import Attachment

TokenCounter = Callable[[str], int]
MIN_TOKENS = 200
MAX_TOKENS = 400
PROSE_SUFFIXES = frozenset({"", ".md", ".markdown", ".mdown", ".mkd", ".txt", ".text", ".rst"})

_ATX = re.compile(r"^ {0,3}#{1,6}[ \t]+(.+?)(?:[ \t]+#+)?[ \t]*$")
_UNDERLINE = re.compile(r"^ {0,3}([=\-~^*+#])\1{2,}[ \t]*$")
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_LINK = re.compile(r"!?\[([^\]]*)\]\([^)]*\)")


@dataclass(frozen=True)
class Chunk:
    file: str
    sha256: str
    """The attachment's sha256: a chunk is named by (sha256, start_line, end_line)."""
    section: str
    """The heading the chunk starts under ("" when there is none; "page N" in a PDF)."""
    start_line: int
    end_line: int
    tokens: int
    text: str


@dataclass(frozen=True)
class _Unit:
    start: int  # 0-based line indices, inclusive
    end: int
    section: str
    heading: bool = False
    piece: str | None = None
    """Part of an over-long line; such a unit is a chunk of its own."""


def chunk_attachment(attachment: Attachment, count_tokens: TokenCounter, *,
                     min_tokens: int = MIN_TOKENS, max_tokens: int = MAX_TOKENS) -> list[Chunk]:
    """Chunks covering the whole attachment, in order."""
    lines = attachment.text.split("\n")
    if lines and lines[-1] == "" and len(lines) > 1:
        lines.pop()  # the final newline ends the last line; it does not start another
    prose = attachment.kind == "pdf" or PurePosixPath(attachment.name).suffix.lower() in PROSE_SUFFIXES
    sized = _sized(_units(lines, prose), lines, count_tokens, max_tokens)
    chunks = []
    for units in _pack(sized, min_tokens, max_tokens):
        first, last = units[0], units[-1]
        text = first.piece if first.piece is not None else "\n".join(lines[first.start: last.end + 1])
        section = first.section
        if attachment.page_starts:
            page = f"page {attachment.page_of_line(first.start + 1)}"
            section = f"{page}, {section}" if section else page
        chunks.append(Chunk(attachment.name, attachment.sha256, section, first.start + 1, last.end + 1,
                            count_tokens(text), text))
    return chunks


def _structure(lines: list[str], prose: bool) -> tuple[dict[int, tuple[int, str]], dict[int, int]]:
    """{first line: (last line, title)} of each heading, and {first line: last line} of each code fence."""
    headings: dict[int, tuple[int, str]] = {}
    fences: dict[int, int] = {}
    i = 0
    while i < len(lines):
        line = lines[i]
        opening = _FENCE.match(line)
        if opening:
            mark, end = opening.group(1), len(lines) - 1  # an unclosed fence runs to the end
            for j in range(i + 1, len(lines)):
                closing = lines[j].strip()
                if closing.startswith(mark) and set(closing) == {mark[0]}:
                    end = j
                    break
            fences[i] = end
            i = end + 1
            continue
        if prose:
            atx = _ATX.match(line)
            if atx:
                headings[i] = (i, _plain(atx.group(1)))
            elif _UNDERLINE.match(line) and i > 0 and lines[i - 1].strip() and (i - 1) not in headings:
                title = i - 1
                before = lines[title - 1] if title > 0 else ""
                if _UNDERLINE.match(before) and before.strip()[0] == line.strip()[0]:
                    headings[title - 1] = (i, _plain(lines[title]))  # reST over- and underlined title
                elif not before.strip() and not _UNDERLINE.match(lines[title]):
                    headings[title] = (i, _plain(lines[title]))
        i += 1
    return headings, fences


def _units(lines: list[str], prose: bool) -> list[_Unit]:
    headings, fences = _structure(lines, prose)
    units, section, i = [], "", 0
    while i < len(lines):
        if i in headings:
            end, section = headings[i]
            units.append(_Unit(i, end, section, heading=True))
        elif i in fences:
            end = fences[i]
            units.append(_Unit(i, end, section))
        elif not lines[i].strip():
            i += 1
            continue
        else:
            end = i
            while (end + 1 < len(lines) and lines[end + 1].strip() and end + 1 not in headings
                   and end + 1 not in fences):
                end += 1
            units.append(_Unit(i, end, section))
        i = end + 1
    return units


def _sized(units: list[_Unit], lines: list[str], count: TokenCounter, max_tokens: int):
    """(unit, tokens) pairs where no unit exceeds max_tokens: a bigger unit is replaced by its
    lines, and a bigger line by pieces of it."""
    for unit in units:
        tokens = count(_text(lines, unit))
        if tokens <= max_tokens:
            yield unit, tokens
        elif unit.end > unit.start:
            lines_of_unit = [_Unit(i, i, unit.section) for i in range(unit.start, unit.end + 1) if lines[i].strip()]
            yield from _sized(lines_of_unit, lines, count, max_tokens)
        else:
            for piece in _line_pieces(lines[unit.start], tokens, max_tokens):
                yield _Unit(unit.start, unit.end, unit.section, piece=piece), count(piece)


def _pack(sized, min_tokens: int, max_tokens: int) -> list[list[_Unit]]:
    """Group units, in order, into the units of each chunk."""
    chunks: list[list[_Unit]] = []
    current: list[tuple[_Unit, int]] = []
    size = 0

    def close(carry_headings: bool) -> None:
        nonlocal current, size
        carried = []
        while carry_headings and current and current[-1][0].heading:
            carried.insert(0, current.pop())  # a heading belongs with what follows it
        if current:
            chunks.append([unit for unit, _ in current])
        current = carried
        size = sum(tokens + 1 for _, tokens in carried)

    for unit, tokens in sized:
        if unit.piece is not None:
            close(carry_headings=False)
            chunks.append([unit])
            continue
        if unit.heading and size >= min_tokens:
            close(carry_headings=False)
        if current and size + tokens + 1 > max_tokens:  # +1: the line break joining them
            close(carry_headings=True)
        current.append((unit, tokens))
        size += tokens + 1
    close(carry_headings=False)
    return chunks


def _line_pieces(line: str, tokens: int, max_tokens: int) -> list[str]:
    """One over-long line cut into about tokens/max_tokens pieces, at spaces where there are any."""
    n = -(-tokens // max_tokens)
    pieces, start = [], 0
    for k in range(1, n):
        cut = len(line) * k // n
        space = line.rfind(" ", start + 1, cut + 1)
        cut = space + 1 if space > start else cut
        pieces.append(line[start:cut])
        start = cut
    pieces.append(line[start:])
    return [p for p in pieces if p]


def _text(lines: list[str], unit: _Unit) -> str:
    return "\n".join(lines[unit.start: unit.end + 1])


def _plain(title: str) -> str:
    """A heading without Markdown link syntax, emphasis or code marks."""
    return _LINK.sub(r"\1", title).replace("`", "").replace("**", "").strip().strip("#").strip()
