"""Saving and resuming sessions: the transcript in SQLite, the KV cache in a state file.

    manager = SessionManager.open(settings)
    live = manager.resume("work", engine)      # loads the transcript into the engine, restores its cache
    live.report.notice                         # "restored 1,874 tokens in 9 ms; ..." or why not
    for event in engine.send(text): ...
    live.save_turn(record)                     # after each TurnDone (a stopped turn included)
    live.save_now()                            # on quit, or whenever there is no record

The manager talks to the `Engine` only (conversation, prompt ids, cache save and restore), so
sessions work the same on every backend.

The transcript is written first, in one transaction; the state file after it. A state that is
missing, damaged, from another model/context/build, or that doesn't match the transcript
token for token is not loaded: the cache is cleared and the next turn re-prefills.
"""

from __future__ import annotations

import contextlib
import threading
import time
from dataclasses import replace
from pathlib import Path

from chatapp import paths
from chatapp.config import Settings
from chatapp.engine.backend import CacheState
from chatapp.engine.conversation import common_prefix
from chatapp.engine.engine import Engine
from chatapp.engine.sessions.files import atomic_write, clean_temp_files, evict_lru, touch
from chatapp.engine.sessions.fingerprint import mismatch, model_id
from chatapp.engine.sessions.names import validate_name
from chatapp.engine.sessions.reports import ResumeReport, SaveReport, reprefill_estimate
from chatapp.engine.sessions.statefile import SUFFIX, StateFile, StateRejected, encode_state, read_state
from chatapp.engine.sessions.store import ModelIdentity, SessionStore, Snapshot, StoredSession, TurnRow
from chatapp.engine.stats import TurnRecord
from chatapp.private import make_private_dir

MIB = 1024 * 1024
STATES_DIR = "states"


class SessionManager:
    def __init__(self, store: SessionStore, cap_bytes: int):
        self.store = store
        self.cap_bytes = cap_bytes
        self.states_dir = store.directory / STATES_DIR

    @classmethod
    def open(cls, settings: Settings, directory: Path | None = None, *, create: bool = True) -> "SessionManager":
        """Open the sessions folder (paths.sessions_dir() by default). Raises SessionError for a
        database that is unwritable, damaged or from a newer chatapp. Without `create`
        (read-only commands) nothing is written."""
        store = SessionStore.open(directory or paths.sessions_dir(), create=create)
        manager = cls(store, settings.state_cap_mb * MIB)
        if create:
            clean_temp_files(manager.states_dir)
        return manager

    def state_path(self, state_key: str) -> Path:
        return self.states_dir / f"{state_key}{SUFFIX}"

    def state_size(self, state_key: str) -> int | None:
        try:
            return self.state_path(state_key).stat().st_size
        except OSError:
            return None

    def delete(self, name: str) -> None:
        key = self.store.delete(name)
        with contextlib.suppress(OSError):
            self.state_path(key).unlink()

    def rename(self, old: str, new: str) -> None:
        self.store.rename(old, validate_name(new))

    def prefill_tps(self, engine: Engine, fingerprint: dict | None = None) -> float | None:
        """This machine's measured prefill speed for the engine's model, from saved turns."""
        fingerprint = fingerprint or engine.fingerprint()
        return self.store.prefill_speed(model_id(fingerprint), engine.summary.backend)

    # --- resume ----------------------------------------------------------------------
    def resume(self, name: str, engine: Engine) -> "LiveSession":
        """Load session `name` into the engine's chat, restoring its KV cache when the saved
        state is valid and leaving the cache empty otherwise. An unknown name starts a new
        session from the chat as it stands; it is written on the first save."""
        validate_name(name)
        stored = self.store.load(name)
        live = LiveSession(self, name, engine)
        if stored is None:  # a new session starts from the chat as it is (and its cache)
            live.report = ResumeReport(name, created=True, messages=len(engine.messages))
            return live
        engine.clear_cache()
        n_system = 1 if stored.messages and stored.messages[0].role == "system" else 0
        engine.load_conversation(stored.messages, stored.window_start)
        engine.set_attachments(stored.attachments)  # sized for this model: it retrieves as before
        notices = stored.notices
        if stored.attachments:
            names = ", ".join(a.name for a in stored.attachments)
            notices = (f"{len(stored.attachments)} attachment{'s' if len(stored.attachments) != 1 else ''} "
                       f"restored: {names}", *notices)
        started = time.perf_counter()
        expected = engine.prompt_ids()
        restored, reason = self._restore(live, stored, expected)
        restore_ms = (time.perf_counter() - started) * 1000
        if restored:
            estimate = reprefill_estimate(restored, self.prefill_tps(engine, live.fingerprint))
            live.report = ResumeReport(name, False, len(stored.messages), restored_tokens=restored,
                                       restore_ms=restore_ms, estimate_s=estimate, notices=notices)
        else:
            has_turns = len(stored.messages) > n_system
            live.report = ResumeReport(name, False, len(stored.messages), fallback=reason if has_turns else None,
                                       reprefill_tokens=len(expected) if has_turns else 0, notices=notices)
        live.pending = live.report
        return live

    def _restore(self, live: "LiveSession", stored: StoredSession, expected: list[int]) -> tuple[int, str]:
        engine = live.engine
        path = self.state_path(stored.state_key)
        try:
            state = read_state(path)
        except StateRejected as exc:
            return 0, str(exc)
        try:
            current = live.fingerprint
        except OSError as exc:
            return 0, f"cannot fingerprint the model ({exc.strerror or exc})"
        reason = mismatch(state.fingerprint, current)
        if reason:
            return 0, reason
        valid = state.n_valid
        if valid == 0:
            return 0, "the state holds no tokens of this transcript"
        if valid > len(expected) or state.tokens[:valid] != expected[:valid]:
            at = common_prefix(state.tokens[:valid], expected)
            return 0, f"token mismatch: the state differs from the transcript at token {at:,}"
        if not engine.restore_cache(CacheState(state.tokens, state.payload, state.fingerprint), valid):
            return 0, f"{'llama.cpp' if engine.summary.kind == 'in-process' else 'llama-server'} could not load the state"
        touch(path)
        return valid, ""

    # --- save ------------------------------------------------------------------------
    def write_state(self, key: str, engine: Engine, fingerprint: dict) -> SaveReport:
        """Write the engine's KV cache as the state of the session whose state key is `key`."""
        path = self.state_path(key)
        kv = engine.cached_tokens()
        if not kv:  # nothing cached: an older state would only mislead
            with contextlib.suppress(OSError):
                path.unlink()
            return SaveReport(None)
        valid = common_prefix(kv, engine.prompt_ids())
        try:
            make_private_dir(self.states_dir)
            cache = engine.save_cache(key)
            meta = {**fingerprint, **cache.meta}
            size = atomic_write(path, encode_state(StateFile(meta, cache.tokens, valid, cache.payload)))
            evicted = evict_lru(self.states_dir, SUFFIX, self.cap_bytes)
        except OSError as exc:
            return SaveReport(None, notices=[f"KV state not saved ({exc.strerror or exc}); the transcript is saved"])
        if path in evicted:
            return SaveReport(None, notices=[f"KV state not kept: {size / MIB:,.1f} MiB is over the "
                                             f"{self.cap_bytes / MIB:,.0f} MiB state cap (state_cap_mb)"])
        return SaveReport(None, state_bytes=size, state_tokens=valid)


class LiveSession:
    """One open session bound to one engine. Safe to save from a worker thread."""

    def __init__(self, manager: SessionManager, name: str, engine: Engine):
        self.manager = manager
        self.name = name
        self.engine = engine
        self.report: ResumeReport = ResumeReport(name, created=True, messages=0)
        self.pending: ResumeReport | None = None
        """The resume figures, until the first turn's record carries them."""
        self._fingerprint: dict | None = None
        self._lock = threading.Lock()

    @property
    def fingerprint(self) -> dict:
        if self._fingerprint is None:
            self._fingerprint = self.engine.fingerprint()
        return self._fingerprint

    def annotate(self, record: TurnRecord) -> TurnRecord:
        """The record with the session's name; the first turn after a resume also gets
        restored_tokens and restore_ms (and state_fallback, why a state wasn't used)."""
        if record.extra.get("session") == self.name:
            return record
        extra = {**record.extra, "session": self.name}
        pending, self.pending = self.pending, None
        if pending is None:
            return replace(record, extra=extra)
        if pending.fallback:
            extra["state_fallback"] = pending.fallback
        return replace(record, extra=extra, restored_tokens=pending.restored_tokens, restore_ms=pending.restore_ms)

    def save_turn(self, record: TurnRecord) -> SaveReport:
        """Autosave after a completed (or stopped) turn: transcript and record, then the KV state."""
        return self._save(record)

    def save_now(self) -> SaveReport:
        """Save the transcript and KV state as they are (on quit, after a stop, or any time)."""
        return self._save(None)

    def _save(self, record: TurnRecord | None) -> SaveReport:
        with self._lock:
            started = time.perf_counter()
            engine = self.engine
            summary, messages = engine.summary, engine.messages
            fingerprint = self.fingerprint
            identity = ModelIdentity(summary.name, summary.path, model_id(fingerprint), summary.quant or "")
            turn = None
            if record is not None:
                record = self.annotate(record)
                data = record.to_json()
                data.update(model=summary.name, quant=summary.quant, backend=summary.backend,
                            kv_type=summary.kv_type, threads=data.get("threads", summary.threads),
                            layers_offloaded=summary.layers_offloaded)
                last = max((i for i, m in enumerate(messages) if m.role == "assistant"), default=-1)
                turn = TurnRow(last, summary.backend, record.prefill_tokens, record.prefill_ms, data)
            snapshot = Snapshot(self.name, identity, list(messages), engine.window_start, engine.kv_used(),
                                tuple(plan.attachment for plan in engine.attachments))
            key = self.manager.store.save(snapshot, turn)
            state = self.manager.write_state(key, engine, fingerprint)
            return replace(state, record=record, save_ms=(time.perf_counter() - started) * 1000)
