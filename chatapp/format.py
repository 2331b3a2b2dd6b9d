"""How figures read, shared by the CLI and every widget so one number always looks the same."""

from __future__ import annotations

import json
import math
from textwrap import shorten
from urllib.parse import urlsplit, urlunsplit

_UNITS = ("B", "KiB", "MiB", "GiB", "TiB")
_WHITESPACE = str.maketrans({" ": "·", "\t": "→", "\r": "␍"})


def human_bytes(n: int | float) -> str:
    """1536 -> "1.50 KiB": binary units, three significant figures from 1 KiB up."""
    value = float(n)
    for unit in _UNITS:
        if abs(value) < 1024 or unit == _UNITS[-1]:
            break
        value /= 1024
    if unit == "B":
        return f"{int(value)} B"
    decimals = 0 if abs(value) >= 100 else 1 if abs(value) >= 10 else 2
    return f"{value:.{decimals}f} {unit}"


def count(n: int) -> str:
    return f"{n:,}"


def human_count(n: int) -> str:
    """134515008 -> "134.5M"."""
    for limit, suffix in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "K")):
        if abs(n) >= limit:
            return f"{n / limit:.1f}{suffix}"
    return str(n)


def ms(value: float) -> str:
    return f"{value:,.1f} ms"


def tps(value: float) -> str:
    return f"{value:,.1f} tok/s"


def percent(fraction: float) -> str:
    return "<1%" if 0 < fraction < 0.01 else f"{fraction:.0%}"


def visible_piece(piece: str) -> str:
    """A token's text with whitespace shown: · for space, → for tab, ↵ before a line break."""
    return piece.translate(_WHITESPACE).replace("\n", "↵\n")


def display_url(url: str) -> str:
    """The URL as chatapp shows and records it: no user:password part, no trailing slash."""
    try:
        parts = urlsplit(url if "://" in url else "http://" + url)
        host = parts.netloc.rsplit("@", 1)[-1]
    except ValueError:
        return url.rsplit("@", 1)[-1]
    return urlunsplit((parts.scheme, host, parts.path.rstrip("/"), "", ""))


# Untrusted text (a reply, a tool's result, a model's metadata, a file or session name) reaches a
# terminal only through these tables: every C0/C1 control character and DEL is shown as its
# backslash escape (ESC as \x1b), because a terminal obeys ESC ] 0 (title), ESC ] 52 (clipboard),
# ESC [ 2 J (clear) and the 8-bit CSI \x9b. `visible_text` keeps newline and tab, which a
# multi-line text needs; one line (`one_line_text`) escapes those too, and also the invisible
# characters that make a name read as another (bidi overrides and isolates, zero-width ones).
_TEXT_CONTROLS = {c: f"\\x{c:02x}" for c in (*range(0x20), 0x7F, *range(0x80, 0xA0)) if c not in (0x09, 0x0A)}
_TEXT_CONTROLS[ord("\r")] = "\\r"
_CONTROLS = {**_TEXT_CONTROLS, ord("\n"): "\\n", ord("\t"): "\\t"}
_INVISIBLE = (0x061C, *range(0x200B, 0x2010), 0x2028, 0x2029, *range(0x202A, 0x202F), *range(0x2060, 0x2065),
              *range(0x2066, 0x206A), 0xFEFF)
"""Characters that draw nothing or reorder what follows (bidi marks, overrides and isolates,
zero-width ones, the line and paragraph separators): how one text passes for another."""
_CONTROLS.update({c: f"\\u{c:04x}" for c in _INVISIBLE})
_JSON_CONTROLS = {c: f"\\u{c:04x}" for c in (0x7F, *range(0x80, 0xA0))}
_JSON_SHOWN = {**_JSON_CONTROLS, **{c: f"\\u{c:04x}" for c in _INVISIBLE}}


def visible_text(text: str) -> str:
    r"""Text from outside, of any length, made safe to print or draw: newlines and tabs kept, every
    other control character shown as its backslash escape (\x1b for ESC, \r, \x9b), so nothing in
    it reaches the terminal as a control sequence. Markup in it is the printer's concern: rich
    strings go through `rich.markup.escape`, Textual widgets get markup=False or a Text."""
    return text.translate(_TEXT_CONTROLS)


def one_line(text: str) -> str:
    """One line of text for the terminal: whitespace runs as one space, and every other control
    character escaped (one_line_text; a message can quote a file name holding an escape sequence)."""
    return one_line_text(" ".join(text.split()))


def text_start(text: str, chars: int) -> str:
    """The start of a text from outside (a tool's description, which can run to pages, or its
    result) on one line (one_line), cut at a word within `chars` with " …" where anything was cut
    (a first word longer than that is cut inside)."""
    line = one_line(text)
    start = shorten(line, chars, placeholder=" …")
    return start if start.strip("… ") or not line else line[:max(chars - 2, 1)] + " …"


def one_line_text(text: str) -> str:
    """Text from outside (a file name, a server's words) made safe for one line of a terminal:
    every control character, escapes (ESC starts ANSI/OSC sequences that could set the title or
    the clipboard) and line breaks included, shown as its backslash escape."""
    return text.translate(_CONTROLS)


def finite(value):
    """`value` with every NaN and ±Infinity (in lists, tuples and dict values, at any depth)
    as None: what JSON can say of a figure that is not a number."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: finite(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(item) for item in value]
    return value


def strict_json(value, **options) -> str:
    """`json.dumps(value, **options)` as RFC 8259 JSON, which has no NaN or Infinity: a
    non-finite figure (an edited record's, a server's) is written as null, and `allow_nan=False`
    makes sure that no other path lets one out. DEL and the C1 controls are written as
    backslash-u escapes even with ensure_ascii=False."""
    try:
        text = json.dumps(value, allow_nan=False, **options)
    except ValueError:  # only a non-finite float raises it: the rare case pays for the copy
        text = json.dumps(finite(value), allow_nan=False, **options)
    # json.dumps escapes C0 but, with ensure_ascii=False, writes DEL and C1 (the 8-bit CSI \x9b)
    # raw; as \u escapes the value read back is the same and a terminal shown the JSON obeys nothing
    return text.translate(_JSON_CONTROLS)


def shown_json(value) -> str:
    """`value` as indented JSON to show someone who must judge it (a tool call's arguments before
    it runs): strict_json, with every invisible or reordering character (_INVISIBLE) as a
    backslash-u escape too. Read back it is the same value, and what it says is what it looks like:
    no string in it can hide a part or read as another."""
    return strict_json(value, indent=2, ensure_ascii=False).translate(_JSON_SHOWN)
