"""The KV-state file format: round trips, every rejection reason, and a reader that never crashes."""

from __future__ import annotations

import hashlib
import json
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chatapp.engine.sessions.statefile import (
    _FIXED, FORMAT_VERSION, MAGIC, StateFile, StateRejected, encode_state, parse_state, read_state,
)

FINGERPRINT = {"model_sha256": "ab" * 32, "model": "m", "quant": "Q4_1", "n_ctx": 1024, "kv_type": "f16",
               "flash_attn": False, "llama_cpp": "ggml 0.25.3 (abc)", "llama_cpp_python": "0.3.36"}
STATE = StateFile(FINGERPRINT, [1, 2, 3, 40000, 5], 4, bytes(range(256)) * 3, created=1_700_000_000.0)


def encoded(state: StateFile = STATE) -> bytes:
    return b"".join(bytes(chunk) for chunk in encode_state(state))


VALID = encoded()


def build(meta: bytes, tokens: list[int], payload: bytes, *, n_valid: int = 0, version: int = FORMAT_VERSION,
          magic: bytes = MAGIC) -> bytes:
    """A file with a correct checksum around arbitrary parts, to reach the checks past it."""
    body = meta + struct.pack(f"<{len(tokens)}I", *tokens) + payload
    head = _FIXED.pack(magic, version, 0, len(meta), len(tokens), n_valid, len(payload), bytes(32))[:-32]
    return head + hashlib.sha256(head + body).digest() + body


def reject_reason(data: bytes) -> str:
    with pytest.raises(StateRejected) as info:
        parse_state(data)
    return str(info.value)


def test_round_trip():
    state = parse_state(VALID)
    assert state.fingerprint == FINGERPRINT
    assert state.tokens == STATE.tokens and state.n_valid == 4
    assert bytes(state.payload) == STATE.payload
    assert state.created == STATE.created


def test_read_state_from_disk(tmp_path):
    path = tmp_path / "x.kvstate"
    path.write_bytes(VALID)
    assert read_state(path).tokens == STATE.tokens
    assert "no saved KV state" in str(pytest.raises(StateRejected, read_state, tmp_path / "missing").value)


@pytest.mark.parametrize(("data", "reason"), [
    (b"", "empty"),
    (VALID[:5], "truncated"),
    (b"garbage!" * 3, "bad magic"),
    (b"GGUF" + VALID[4:], "bad magic"),
    (VALID[:_FIXED.size - 1], "truncated"),
    (VALID[:_FIXED.size + 3], "truncated"),
    (VALID[:len(VALID) // 2], "truncated"),
    (VALID[:-1], "truncated"),
    (VALID + b"\0", "trailing bytes"),
    (build(b"{}", [], b"", version=2), "version 2 is not supported"),
    (build(b"{}", [1], b"", n_valid=2), "impossible sizes"),
    (build(b"not json", [], b""), "not valid JSON"),
    (build(b"\xff\xfe", [], b""), "not valid JSON"),
    (build(b"[1, 2]", [], b""), "no valid fingerprint"),
    (build(json.dumps({"fingerprint": {"a": [1]}}).encode(), [], b""), "no valid fingerprint"),
    (build(json.dumps({"fingerprint": {}, "created": "x"}).encode(), [], b""), "creation time"),
])
def test_rejections_say_why(data, reason):
    assert reason in reject_reason(data)


@pytest.mark.parametrize("offset", [0, 9, 12, 20, _FIXED.size - 1, _FIXED.size + 2, len(VALID) - 300, len(VALID) - 1])
def test_one_flipped_byte_anywhere_is_caught(offset):
    data = bytearray(VALID)
    data[offset] ^= 0x10
    reason = reject_reason(bytes(data))
    assert any(word in reason for word in ("checksum", "magic", "version", "truncated", "trailing", "impossible"))


def test_encode_refuses_n_valid_beyond_tokens():
    with pytest.raises(ValueError):
        encode_state(StateFile(FINGERPRINT, [1], 2, b""))


# --- the reader only accepts or rejects --------------------------------------------------
def parse_or_reject(data: bytes) -> None:
    try:
        state = parse_state(data)
    except StateRejected as exc:
        assert str(exc)
        return
    assert isinstance(state.fingerprint, dict) and isinstance(state.tokens, list)
    assert 0 <= state.n_valid <= len(state.tokens)


FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FUZZ
@given(st.binary(max_size=2048))
def test_random_bytes(data):
    parse_or_reject(data)


@FUZZ
@given(st.binary(max_size=256))
def test_random_bytes_after_a_valid_magic(tail):
    parse_or_reject(MAGIC + struct.pack("<H", FORMAT_VERSION) + tail)


@FUZZ
@given(st.lists(st.tuples(st.integers(0, len(VALID) - 1), st.integers(1, 255)), min_size=1, max_size=8))
def test_mutated_valid_files(flips):
    data = bytearray(VALID)
    for offset, mask in flips:
        data[offset] ^= mask
    parse_or_reject(bytes(data))


@FUZZ
@given(st.integers(0, len(VALID)), st.binary(max_size=64), st.integers(0, 64))
def test_spliced_valid_files(at, insert, drop):
    parse_or_reject(VALID[:at] + insert + VALID[at + drop:])


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20)


@FUZZ
@given(st.one_of(st.binary(max_size=200), json_values.map(lambda v: json.dumps(v).encode()),
                 st.dictionaries(st.sampled_from(["fingerprint", "created"]), json_values).map(
                     lambda v: json.dumps(v).encode())),
       st.lists(st.integers(0, 2**32 - 1), max_size=20), st.binary(max_size=64), st.integers(0, 30))
def test_checksummed_files_with_arbitrary_contents(meta, tokens, payload, n_valid):
    parse_or_reject(build(meta, tokens, payload, n_valid=n_valid))


@FUZZ
@given(st.dictionaries(st.text(max_size=10), st.one_of(st.text(max_size=10), st.integers(-2**40, 2**40),
                                                         st.booleans()), max_size=6),
       st.lists(st.integers(0, 2**32 - 1), max_size=50), st.binary(max_size=300), st.data())
def test_any_valid_state_round_trips(fingerprint, tokens, payload, data):
    n_valid = data.draw(st.integers(0, len(tokens)))
    state = parse_state(encoded(StateFile(fingerprint, tokens, n_valid, payload, created=1.0)))
    assert (state.fingerprint, state.tokens, state.n_valid, bytes(state.payload)) == \
        (fingerprint, tokens, n_valid, payload)


def test_a_huge_foreign_file_is_rejected_from_its_header(tmp_path):
    path = tmp_path / "big.kvstate"
    with open(path, "wb") as f:
        f.truncate(8 * 2**30)  # sparse: 8 GiB that must not be read into memory
    assert "bad magic" in str(pytest.raises(StateRejected, read_state, path).value)
    with open(path, "r+b") as f:
        f.write(VALID[:_FIXED.size])
    assert "trailing bytes" in str(pytest.raises(StateRejected, read_state, path).value)


@FUZZ
@given(st.binary(max_size=600))
def test_read_state_from_random_files(tmp_path_factory, data):
    path = tmp_path_factory.mktemp("fuzz") / "x.kvstate"
    path.write_bytes(data)
    try:
        read_state(path)
    except StateRejected:
        pass
