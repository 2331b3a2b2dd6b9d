"""Texts that are hard to tokenize and detokenize round-trip (emoji, CJK, combining marks)."""

from __future__ import annotations


SAMPLES = [
    "Hello, world! The quick brown fox.",
    "emoji: 🦙🔥👩‍👩‍👧 done",
    "CJK: 日本語のテキストと中文字符",
    "whitespace   runs\t\tand\n\n\nnewlines    ",
    "combining: e\u0301 a\u0308 n\u0303 and Zalgo z\u0336\u0311\u0300",
    "  leading spaces",
]
