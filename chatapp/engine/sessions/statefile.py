"""chatapp's KV-state file: a small header of its own, then llama.cpp's sequence-state payload.

Layout (little endian):

    fixed header   magic "CHATKV\\r\\n", format version u16, flags u16, metadata length u32,
                   token count u32, valid-token count u32, payload length u64, sha256 (32 bytes)
    metadata       UTF-8 JSON: {"fingerprint": {...}, "created": unix time}
    tokens         u32 token ids, in position order: what the payload's cells hold
    payload        llama_state_seq_get_data() of sequence 0

The sha256 covers every byte except itself. `n_valid` is how many leading tokens matched the
transcript when the state was saved; only those are restored.

`parse_state` only ever returns a StateFile or raises StateRejected with a reason.
"""

from __future__ import annotations

import hashlib
import json
import mmap
import os
import struct
import time
from dataclasses import dataclass
from pathlib import Path

from chatapp.paths import open_regular
from chatapp.private import foreign_owner

MAGIC = b"CHATKV\r\n"
FORMAT_VERSION = 1
SUFFIX = ".kvstate"
_FIXED = struct.Struct("<8sHHIIIQ32s")
_DIGEST_AT = _FIXED.size - 32
MAX_META = 64 * 1024
MAX_TOKENS = 1 << 24
READ_CHUNK = 1 << 20


class StateRejected(Exception):
    """The state file can't be used; the message says why, in a few words."""


@dataclass(frozen=True)
class StateFile:
    fingerprint: dict[str, str | int | bool]
    tokens: list[int]
    n_valid: int
    payload: memoryview | bytes
    created: float = 0.0


def encode_state(state: StateFile) -> list[bytes | memoryview]:
    """The file's bytes, as chunks (the payload is not copied)."""
    if not 0 <= state.n_valid <= len(state.tokens) <= MAX_TOKENS:
        raise ValueError("n_valid must be within the token list")
    meta = json.dumps({"fingerprint": state.fingerprint, "created": state.created or time.time()},
                      sort_keys=True, ensure_ascii=True).encode()
    tokens = struct.pack(f"<{len(state.tokens)}I", *state.tokens)
    head = _FIXED.pack(MAGIC, FORMAT_VERSION, 0, len(meta), len(state.tokens), state.n_valid,
                       len(state.payload), bytes(32))[:_DIGEST_AT]
    digest = hashlib.sha256(head)
    for part in (meta, tokens, state.payload):
        digest.update(part)
    return [head, digest.digest(), meta, tokens, state.payload]


def check_header(head: bytes | memoryview, size: int) -> tuple:
    """The fixed header's fields, checked against the file's total size (rejects a wrong or
    truncated file from its first bytes alone)."""
    if size == 0:
        raise StateRejected("the state file is empty")
    if len(head) < _FIXED.size:
        if bytes(head[:len(MAGIC)]) != MAGIC[:min(len(head), len(MAGIC))]:
            raise StateRejected("not a chatapp KV state (bad magic)")
        raise StateRejected(f"the state file is truncated ({size} bytes, shorter than its header)")
    fields = _FIXED.unpack_from(head)
    magic, version, _flags, meta_len, n_tokens, n_valid, payload_len, _digest = fields
    if magic != MAGIC:
        raise StateRejected("not a chatapp KV state (bad magic)")
    if version != FORMAT_VERSION:
        raise StateRejected(f"state format version {version} is not supported (this chatapp reads {FORMAT_VERSION})")
    if meta_len > MAX_META or n_tokens > MAX_TOKENS or n_valid > n_tokens:
        raise StateRejected("the state header is corrupt (impossible sizes)")
    expected = _FIXED.size + meta_len + 4 * n_tokens + payload_len
    if size < expected:
        raise StateRejected(f"the state file is truncated ({size:,} of {expected:,} bytes)")
    if size > expected:
        raise StateRejected(f"the state file has {size - expected:,} unexpected trailing bytes")
    return fields


def parse_state(data: bytes | bytearray | memoryview, *, computed_digest: bytes | None = None) -> StateFile:
    """Check and decode a whole state file. `computed_digest` is the sha256 a reader already
    took of the same bytes (all but the stored digest) while reading them."""
    view = memoryview(data)
    _, _, _, meta_len, n_tokens, n_valid, _, digest = check_header(view[:_FIXED.size], len(view))
    if computed_digest is None:
        check = hashlib.sha256(view[:_DIGEST_AT])
        check.update(view[_FIXED.size:])
        computed_digest = check.digest()
    if computed_digest != digest:
        raise StateRejected("checksum mismatch (the state file is corrupt)")
    meta_end = _FIXED.size + meta_len
    tokens_end = meta_end + 4 * n_tokens
    fingerprint, created = _parse_meta(view[_FIXED.size:meta_end])
    tokens = list(struct.unpack_from(f"<{n_tokens}I", view, meta_end))
    return StateFile(fingerprint, tokens, n_valid, view[tokens_end:], created)


def _parse_meta(raw: memoryview) -> tuple[dict, float]:
    try:
        meta = json.loads(bytes(raw).decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise StateRejected("the state metadata is not valid JSON") from None
    fingerprint = meta.get("fingerprint") if isinstance(meta, dict) else None
    if not isinstance(fingerprint, dict) or not all(
            isinstance(k, str) and isinstance(v, (str, int, bool)) for k, v in fingerprint.items()):
        raise StateRejected("the state metadata has no valid fingerprint")
    created = meta.get("created", 0.0)
    if isinstance(created, bool) or not isinstance(created, (int, float)):
        raise StateRejected("the state metadata has no valid creation time")
    return fingerprint, float(created)


def read_state(path: Path) -> StateFile:
    """Read and check a state file. A file whose header is wrong is rejected before the rest
    is read; the rest is hashed as it is read, while it is still in the CPU cache. The payload
    comes back writable, so llama.cpp can load it without a copy."""
    try:
        with open_regular(path) as f:  # a named pipe or a device there is refused, never waited on
            st = os.fstat(f.fileno())
            if (owner := foreign_owner(st)) is not None:
                raise StateRejected(f"the state file belongs to another user (uid {owner})")
            size = st.st_size
            head = f.read(_FIXED.size)
            check_header(head, size)
            data = mmap.mmap(-1, size)  # anonymous, writable, and not zero-filled up front like a bytearray
            view = memoryview(data)
            view[:len(head)] = head
            check = hashlib.sha256(view[:_DIGEST_AT])
            got = len(head)
            while got < size:
                n = f.readinto(view[got:got + READ_CHUNK])
                if not n:
                    break
                check.update(view[got:got + n])
                got += n
    except FileNotFoundError:
        raise StateRejected("no saved KV state") from None
    except OSError as exc:
        raise StateRejected(f"cannot read the state file ({exc.strerror or exc})") from None
    return parse_state(view[:got], computed_digest=check.digest())
