"""A turn's record as sessions.db keeps it: strict JSON of at most RECORD_CAP bytes when
chatapp writes it, and read back only up to that size. A longer one (an edited database, or one
written before the cap) is summarized from its row's own columns, never read into memory: a
660 MB record cost 3.3 GB to `sessions show`, and every resume parsed every record."""

from __future__ import annotations

import json
import sqlite3

from chatapp.format import strict_json

RECORD_CAP = 16 << 20
"""The most bytes of one turn's record written or read. A record is a turn's figures (about
2 KB) plus, for a turn run with --logprobs, each token's probabilities: about 1.6 KB a token
with 20 alternatives, so 16 MiB holds a 10,000-token reply's."""
UNREAD = "record_bytes_unread"
"""The key of a summarized record (and of its journal entry): the record's size in bytes."""
_DECODER = json.JSONDecoder(parse_constant=lambda _: None)
"""json.loads as a record is read: NaN and ±Infinity (an edited record's) are no figure."""


def record_text(record: dict) -> str:
    """`record` as saved: strict JSON (a non-finite figure as null). Over RECORD_CAP it is saved
    without its per-token probabilities ("logprobs_dropped" says how many there were), and if
    still over, with its figures only (numbers, flags and strings under 1 KiB)."""
    text = strict_json(record, ensure_ascii=False)
    if len(text.encode()) <= RECORD_CAP:
        return text
    probs = record.get("logprobs")
    lighter = {key: value for key, value in record.items() if key != "logprobs"}
    lighter["logprobs_dropped"] = len(probs) if isinstance(probs, list) else 0
    text = strict_json(lighter, ensure_ascii=False)
    if len(text.encode()) <= RECORD_CAP:
        return text
    return strict_json({key: value for key, value in lighter.items() if _figure(value)}, ensure_ascii=False)


def _figure(value) -> bool:
    return value is None or isinstance(value, (bool, int, float)) or isinstance(value, str) and len(value) < 1024


def read_record(conn: sqlite3.Connection, rowid: int, kind: str, summary: dict) -> dict:
    """The record of the turns row `rowid` (`kind`: SQLite's typeof of its record), parsed when
    it is text of at most RECORD_CAP bytes; longer, `summary` (figures from the row's other
    columns) with its size under UNREAD; anything that is not a JSON object, {} (a record only
    holds figures: one that can't be read shows none). The size comes from the row's header,
    through SQLite's incremental blob I/O, so a longer record is never read at all."""
    if kind != "text":
        return {}
    try:
        with conn.blobopen("turns", "record", rowid, readonly=True) as blob:
            size = len(blob)
            raw = blob.read() if size <= RECORD_CAP else None
    except sqlite3.Error:  # the row went away since it was listed
        return {}
    if raw is None:
        return {**summary, UNREAD: size}
    try:
        data = _DECODER.decode(raw.decode("utf-8"))
    except (ValueError, RecursionError):
        return {}
    return data if isinstance(data, dict) else {}
