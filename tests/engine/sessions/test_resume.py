"""Saving and resuming sessions against the real default model.

One module-wide engine saves a one-turn session; each test then damages or swaps its state
and resumes. A usable state must restore exactly; anything else must fall back with a reason,
keep the whole transcript, leave the cache empty, and answer as a fresh process would.
"""

from __future__ import annotations

import dataclasses
import errno
import shutil
import struct
from pathlib import Path

import pytest

from chatapp.config import Settings
from chatapp.engine.sessions import SessionManager
from chatapp.engine.sessions.manager import MIB, LiveSession
from chatapp.engine.sessions.statefile import StateFile, encode_state, parse_state
from chatapp.engine.events import Message
from chatapp.engine.sessions.store import Saved, Snapshot

from tests.private_helpers import give_away

from tests.engine.conftest import runtime_of
from .session_helpers import SETTINGS, open_engine, prefill_history, run_turn, synthetic_history

P1, P2 = "Name a colour.", "Name another one."


@pytest.fixture(scope="module")
def engine(default_model_path):
    engine = open_engine(default_model_path)
    yield engine
    engine.close()


@pytest.fixture(scope="module")
def saved(engine, tmp_path_factory):
    """Turn 1 saved in session "s"; then what turn 2 says continuing in-process, and fresh."""
    directory = tmp_path_factory.mktemp("sessions")
    manager = SessionManager.open(SETTINGS, directory)
    live = manager.resume("s", engine)
    assert live.report.created and live.report.notice is None
    first = live.annotate(run_turn(engine, P1))
    report = live.save_turn(first)
    state = manager.active_state_path(manager.store.get("s")).read_bytes()
    continued = run_turn(engine, P2)
    fresh_engine = open_engine(Path(engine.summary.path))
    try:
        fresh_engine.load_conversation(manager.store.get("s").messages)
        fresh = run_turn(fresh_engine, P2)
    finally:
        fresh_engine.close()
    return dict(directory=directory, report=report, state=state,
                continued=continued, fresh=fresh, messages=manager.store.get("s").messages)


@pytest.fixture
def manager(saved, tmp_path):
    """A fresh copy of the saved session in this test's own folder."""
    shutil.copytree(saved["directory"], tmp_path / "sessions")
    return SessionManager.open(SETTINGS, tmp_path / "sessions")


def state_path(manager):
    return manager.active_state_path(manager.store.get("s"))


def stored_as_saved(manager) -> Saved:
    """Session "s" as the save that wrote it would describe it."""
    stored = manager.store.get("s")
    return Saved(stored.name, stored.state_key, stored.revision)


def write_state(manager, data: bytes) -> None:
    state_path(manager).write_bytes(data)


def resume_and_answer(manager, engine, saved) -> tuple[LiveSession, object]:
    live = manager.resume("s", engine)
    assert engine.messages == saved["messages"], "the transcript must load whole"
    return live, live.annotate(run_turn(engine, P2))


def assert_fell_back(live, record, engine, saved, reason: str) -> None:
    assert live.report.fallback is not None and reason in live.report.fallback, live.report.fallback
    assert live.report.restored_tokens == 0
    assert live.report.notice.startswith("saved KV state not used (") and "re-prefilling" in live.report.notice
    assert record.restored_tokens == 0 and record.cached_tokens == 0
    assert record.prefill_tokens == record.prompt_tokens
    assert record.extra["state_fallback"] == live.report.fallback
    assert record.reply == saved["fresh"].reply


def test_the_first_save_writes_transcript_turn_and_state(saved, manager):
    report = saved["report"]
    assert report.notices == [] and report.state_bytes == len(saved["state"]) and report.state_tokens > 0
    assert report.record.extra["session"] == "s" and "state_fallback" not in report.record.extra
    [(index, record)] = manager.store.turn_records("s")
    assert index == 2 and record["reply"] == saved["messages"][2].content
    assert record["quant"] == "Q4_1" and record["kv_type"] == "f16" and record["backend"] == "CPU"


def test_resume_restores_and_prefills_only_the_new_turn(manager, engine, saved):
    write_state(manager, saved["state"])
    live, record = resume_and_answer(manager, engine, saved)
    restored = parse_state(saved["state"]).n_valid
    assert live.report.fallback is None and live.report.restored_tokens == restored
    assert live.report.notice.startswith(f"restored {restored:,} tokens in ")
    assert "re-prefill would take ~" in live.report.notice  # turn 1's prefill speed was measured
    assert record.restored_tokens == restored == record.cached_tokens
    assert record.prefill_tokens == record.prompt_tokens - record.restored_tokens
    assert record.reply == saved["continued"].reply
    assert record.extra["session"] == "s" and "state_fallback" not in record.extra


def test_resume_records_figures_on_the_first_turn_only(manager, engine, saved):
    write_state(manager, saved["state"])
    live, first = resume_and_answer(manager, engine, saved)
    second = live.annotate(run_turn(engine, "And a third?"))
    assert first.restored_tokens > 0 and second.restored_tokens == 0 and second.restore_ms == 0
    assert live.annotate(first) is first  # annotating twice changes nothing


def corrupt_variants(valid: bytes) -> dict[str, tuple[bytes, str]]:
    def flipped(offset: int) -> bytes:
        data = bytearray(valid)
        data[offset] ^= 0x01
        return bytes(data)

    bad_version = bytearray(valid)
    bad_version[8] = 9
    return {
        "zero bytes": (b"", "empty"),
        "truncated in the header": (valid[:20], "truncated"),
        "truncated after the header": (valid[:80], "truncated"),
        "truncated mid-payload": (valid[:len(valid) // 2], "truncated"),
        "truncated by one byte": (valid[:-1], "truncated"),
        "one flipped byte in the payload": (flipped(len(valid) - 1000), "checksum mismatch"),
        "one flipped byte in the metadata": (flipped(70), "checksum mismatch"),
        "wrong magic": (b"XXXXXXXX" + valid[8:], "bad magic"),
        "wrong version": (bytes(bad_version), "version 9 is not supported"),
    }


@pytest.mark.parametrize("variant", list(corrupt_variants(b"x" * 4096)))
def test_a_corrupt_state_falls_back_and_loses_nothing(manager, engine, saved, variant):
    data, reason = corrupt_variants(saved["state"])[variant]
    write_state(manager, data)
    live, record = resume_and_answer(manager, engine, saved)
    assert_fell_back(live, record, engine, saved, reason)


def test_a_missing_state_falls_back(manager, engine, saved):
    state_path(manager).unlink()
    live, record = resume_and_answer(manager, engine, saved)
    assert_fell_back(live, record, engine, saved, "no saved KV state")


def test_a_state_of_another_user_is_not_loaded(manager, engine, saved, monkeypatch):
    give_away(state_path(manager), monkeypatch)
    live, record = resume_and_answer(manager, engine, saved)
    assert_fell_back(live, record, engine, saved, "the state file belongs to another user (uid ")


def reforged(saved, **changes) -> bytes:
    """The saved state re-encoded (with a good checksum) after changing some of it."""
    state = parse_state(saved["state"])
    fingerprint = {**state.fingerprint, **changes.pop("fingerprint", {})}
    return b"".join(bytes(c) for c in encode_state(dataclasses.replace(state, fingerprint=fingerprint, **changes)))


@pytest.mark.parametrize(("changes", "reason"), [
    ({"kv_type": "q8_0"}, "other KV type (state q8_0, now f16)"),
    ({"llama_cpp": "ggml 0.0.1 (0000000)"}, "other llama.cpp build"),
    ({"llama_cpp_python": "0.2.0"}, "other llama-cpp-python version"),
    ({"flash_attn": True}, "other flash-attention setting"),  # an f16 cache here runs it off
    ({"model_sha256": "0" * 64, "model": "Other 7B", "quant": "Q8_0"}, "other model or quant (Other 7B Q8_0)"),
    # a llama-server's state of the same model: its backend is named, not "other model or quant"
    ({"backend": "llama-server"}, "it was saved by the llama-server backend; this chat runs in-process"),
])
def test_a_state_from_another_setup_falls_back(manager, engine, saved, changes, reason):
    write_state(manager, reforged(saved, fingerprint=changes))
    live, record = resume_and_answer(manager, engine, saved)
    assert_fell_back(live, record, engine, saved, reason)


def test_a_state_whose_cache_is_nan_falls_back(manager, engine, saved):
    """Every f16 of layer 0's keys set to NaN, and the checksum made to match (anyone can):
    llama.cpp loads it, and the first step's logits are all NaN (the reply came out empty)."""
    state = parse_state(saved["state"])
    payload = bytearray(state.payload)
    row = 3 * 64 * 2  # SmolLM2-135M: 3 KV heads of 64, f16
    at = payload.find(struct.pack("<iQ", 1, row)) + 12  # layer 0's key type (f16) and row size, then its rows
    assert at > 12
    payload[at:at + len(state.tokens) * row] = b"\xff" * (len(state.tokens) * row)
    write_state(manager, reforged(saved, payload=bytes(payload)))
    live, record = resume_and_answer(manager, engine, saved)
    assert_fell_back(live, record, engine, saved,
                     "its cache holds NaN or infinite values (layer 0's keys), which make every logit NaN")


def test_a_token_mismatch_falls_back(manager, engine, saved):
    state = parse_state(saved["state"])
    tokens = list(state.tokens)
    tokens[5] = (tokens[5] + 1) % 1000
    write_state(manager, reforged(saved, tokens=tokens))
    live, record = resume_and_answer(manager, engine, saved)
    assert_fell_back(live, record, engine, saved, "token mismatch: the state differs from the transcript at token 5")


def test_a_state_from_another_n_ctx_falls_back(manager, engine, saved, default_model_path):
    small = open_engine(default_model_path, n_ctx=512)
    try:
        prefill_history(small, saved["messages"])
        manager.write_state(stored_as_saved(manager), small, small.fingerprint())
    finally:
        small.close()
    live, record = resume_and_answer(manager, engine, saved)
    assert_fell_back(live, record, engine, saved, "other n_ctx (state 512, now 1024)")


def test_a_state_from_gemma_falls_back(manager, engine, saved, gemma_path):
    gemma = open_engine(gemma_path)
    try:
        prefill_history(gemma, saved["messages"])
        gemma_fingerprint = gemma.fingerprint()
        gemma_state = parse_state(b"".join(bytes(c) for c in encode_state(
            StateFile(gemma_fingerprint, runtime_of(gemma).kv_tokens, len(runtime_of(gemma).kv_tokens),
                      runtime_of(gemma).seq_state()))))
        manager.write_state(stored_as_saved(manager), gemma, gemma_fingerprint)
    finally:
        gemma.close()
    live, record = resume_and_answer(manager, engine, saved)
    assert_fell_back(live, record, engine, saved, "other model or quant (")

    # Even disguised as ours (our fingerprint and tokens), llama.cpp refuses gemma's cache,
    # and the failed restore leaves the context clean.
    ours = parse_state(saved["state"])
    write_state(manager, b"".join(bytes(c) for c in encode_state(
        StateFile(ours.fingerprint, ours.tokens[:len(gemma_state.tokens)], len(gemma_state.tokens) // 2,
                  gemma_state.payload))))
    live, record = resume_and_answer(manager, engine, saved)
    assert_fell_back(live, record, engine, saved, "llama.cpp could not load the state")


def test_a_state_write_failure_keeps_the_transcript(manager, engine, saved, monkeypatch):
    write_state(manager, saved["state"])
    live = manager.resume("s", engine)
    previous = state_path(manager)  # the state of the leaf the turn continues from

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr("chatapp.engine.sessions.manager.atomic_write", full)
    report = live.save_turn(run_turn(engine, P2))
    assert report.notices == ["KV state not saved (No space left on device); the transcript is saved"]
    assert manager.store.get("s").messages == engine.messages
    assert len(manager.store.turn_records("s")) == 2
    assert previous.read_bytes() == saved["state"]  # the previous state is untouched


def test_cap_evicts_least_recently_used_states(engine, tmp_path):
    messages = synthetic_history("cap", 2)
    prefill_history(engine, messages)
    size = len(runtime_of(engine).seq_state()) + 4096
    manager = SessionManager(SessionManager.open(Settings(), tmp_path).store, cap_bytes=int(2.5 * size))
    for name in ("a", "b", "c"):
        LiveSession(manager, name, engine).save_now()
    assert manager.state_size(manager.store.get("a").state_key) is None  # oldest went
    assert all(manager.state_size(manager.store.get(n).state_key) for n in ("b", "c"))

    live = manager.resume("b", engine)  # using b makes c the least recently used
    assert live.report.restored
    LiveSession(manager, "d", engine).save_now()
    assert [n for n in "abcd" if manager.state_size(manager.store.get(n).state_key)] == ["b", "d"]
    assert {s.name for s in manager.store.summaries()} == set("abcd"), "transcripts are never evicted"

    tiny = SessionManager(manager.store, cap_bytes=MIB // 4)
    report = LiveSession(tiny, "e", engine).save_now()
    assert report.notices and "over the 0 MiB state cap" in report.notices[0]


def test_saving_an_empty_cache_removes_a_stale_state(manager, engine, saved):
    write_state(manager, saved["state"])
    live = manager.resume("s", engine)
    runtime_of(engine).clear_kv()
    live.save_now()
    assert not state_path(manager).exists()
    assert manager.store.get("s").messages == saved["messages"]


def test_a_state_is_not_put_over_a_newer_transcript_from_another_process(manager, engine, saved):
    """The transcript is saved first and the state after it: if another process saved the
    session in between, this process's state (of the older transcript) is not put in place."""
    live = manager.resume("s", engine)
    record = live.annotate(run_turn(engine, P2))
    previous = state_path(manager)
    before = previous.read_bytes()
    ours = manager.store.save(Snapshot("s", manager.store.get("s").model, list(engine.messages),
                                       engine.window_start, 0), base=live.revision)
    others = manager.store.get("s").messages + [Message("user", "Elsewhere?"), Message("assistant", "Yes.")]
    manager.store.save(Snapshot("s", manager.store.get("s").model, others, 1, 0), base=ours.revision)
    report = manager.write_state(ours, engine, engine.fingerprint())
    assert report.notices == ["KV state not saved: another process saved the session meanwhile"]
    assert report.state_bytes == 0 and previous.read_bytes() == before
    assert not manager.state_path(ours.state_key, engine.leaf).exists()
    assert record.reply
    assert not [p for p in state_path(manager).parent.iterdir() if p.name.startswith(".")]  # no temp left


def test_a_resumed_session_knows_its_replies_probabilities(engine, tmp_path, default_model_path):
    """The confidence view shades replies drawn again after a session opens: the turn records'
    "logprobs" come back as the engine's probabilities per reply (and a damaged one as none)."""
    manager = SessionManager.open(SETTINGS, tmp_path / "sessions")
    engine.new_chat()
    live = manager.resume("p", engine)
    engine.set_generation(logprobs=5)
    try:
        record = live.annotate(run_turn(engine, P1))
    finally:
        engine.set_generation(logprobs=0)
    live.save_turn(record)
    reply_id = record.extra["message_id"]
    assert engine.reply_probs(reply_id) == record.probs and len(record.probs) == record.generated_tokens
    other = open_engine(default_model_path)
    try:
        SessionManager.open(SETTINGS, tmp_path / "sessions").resume("p", other)
        back = other.reply_probs(reply_id)
        assert [(p.id, p.token, [c.id for c in p.top]) for p in back] == \
               [(p.id, p.token, [c.id for c in p.top]) for p in record.probs]
        assert [p.logprob for p in back] == pytest.approx([p.logprob for p in record.probs], abs=1e-5)
        other.new_chat()
        assert other.reply_probs(reply_id) == ()
    finally:
        other.close()


def test_two_chats_named_alike_at_once_are_kept_apart(engine, tmp_path):
    """Two asks started together with the same first line both chose its name before either was
    saved. The second save merged into the first one's session and was then refused as "changed by
    another process": that ask's turn was lost. A chat kept under a name chosen for it now takes the
    next free one."""
    manager = SessionManager.open(SETTINGS, tmp_path)
    engine.new_chat()
    warm = manager.resume(P1, engine, new=True)
    cold = manager.resume(P1, engine, new=True)  # chosen too before the first chat was saved
    warm.save_turn(warm.annotate(run_turn(engine, f"{P1}\nA warm one.")))
    engine.new_chat()
    saved = cold.save_turn(cold.annotate(run_turn(engine, f"{P1}\nA cold one.")))
    assert saved.notices == [f"{P1!r} was taken by another chat meanwhile; kept as '{P1} 2'"]
    assert cold.name == f"{P1} 2" and saved.record.extra["session"] == f"{P1} 2"
    questions = {name: [m.content for m in manager.store.get(name).messages if m.role == "user"]
                 for name in (P1, f"{P1} 2")}
    assert questions == {P1: [f"{P1}\nA warm one."], f"{P1} 2": [f"{P1}\nA cold one."]}
    assert [record["session"] for _, record in manager.store.turn_records(f"{P1} 2")] == [f"{P1} 2"]
    cold.save_turn(cold.annotate(run_turn(engine, P2)))  # later saves go on in the session it took
    assert [m.content for m in manager.store.get(f"{P1} 2").messages if m.role == "user"][-1] == P2
