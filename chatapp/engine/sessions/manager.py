"""Saving and resuming sessions: the transcript in SQLite, the KV cache in a state file.

    manager = SessionManager.open(settings)
    live = manager.resume("work", engine)      # loads the transcript into the engine, restores its cache
    live.report.notice                         # "restored 1,874 tokens in 9 ms; ..." or why not
    for event in engine.send(text): ...
    live.save_turn(record)                     # after each TurnDone (a stopped turn included)
    live.save_now()                            # on quit, or whenever there is no record

The manager talks to the `Engine` only (conversation, prompt ids, cache save and restore), so
sessions work the same on every backend.

The transcript is written first, in one transaction; the state file after it, and only while
the session is still at the revision that save wrote (so a state never lands on another
process's newer transcript); last, the states no leaf uses any more (`prune_states`), so a
session keeps one state per leaf and a kill at any point leaves one to resume from. A state
that is missing, damaged, from another model/context/build, or that doesn't match the
transcript token for token is not loaded: the cache is cleared and the next turn re-prefills.

Several processes may hold one session. A save that finds turns it has not seen is refused
with SessionConflict ("session changed by another process", exit 1) and writes nothing;
`LiveSession.changed_elsewhere()` lets a caller check before it runs a turn. A session
removed by another process stays removed; one renamed by another process is saved under
its new name (see chatapp.engine.sessions.store).
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from dataclasses import replace
from pathlib import Path

from chatapp import paths
from chatapp.config import Settings
from chatapp.engine.backend import CacheState
from chatapp.engine.tokens import common_prefix
from chatapp.engine.chat.engine import Engine
from chatapp.engine.chat.tree import is_id
from chatapp.engine.events import Message
from chatapp.engine.sessions.files import (
    atomic_write, clean_temp_files, evict_lru, fsync_dir, list_states, temp_path, touch,
)
from chatapp.engine.sessions.fingerprint import Fingerprint, mismatch, model_id
from chatapp.engine.sampling import probs_from_json
from chatapp.engine.sessions.kvcheck import non_finite
from chatapp.engine.sessions.merge import Conflict, plan_save
from chatapp.engine.sessions.names import name_from, valid_state_key, validate_name
from chatapp.engine.sessions.reports import ResumeReport, SaveReport, reprefill_estimate
from chatapp.engine.sessions.statefile import SUFFIX, StateFile, StateRejected, encode_state, read_state
from chatapp.engine.sessions.store import (
    ModelIdentity, Revision, Saved, SessionStore, Snapshot, StoredSession, TurnRow, disk_problem,
)
from chatapp.engine.sessions.window import earliest_start, refit_from
from chatapp.engine.stats import TurnRecord
from chatapp.errors import ChatappError, ServerError, SessionConflict, SessionError, SessionRemoved
from chatapp.format import one_line_text
from chatapp.private import make_private_dir

MIB = 1024 * 1024
STATES_DIR = "states"

SavedKey = tuple[str, tuple[Message, ...], str | None, int, int]
"""What a save wrote: name, messages, active leaf, window start, cached tokens (to skip a repeat)."""


class OpeningStopped(SessionError):
    """The caller's stop (Ctrl+C) came while a session was being opened: nothing was sent or saved."""


class SessionManager:
    def __init__(self, store: SessionStore, cap_bytes: int) -> None:
        self.store: SessionStore = store
        self.cap_bytes: int = cap_bytes
        """The most bytes of KV state files kept (state_cap_mb); the least recently used go first."""
        self.states_dir: Path = store.directory / STATES_DIR
        self.notices: list[str] = []
        """What opening found and tidied (an empty database, orphaned state files), in words."""

    @classmethod
    def open(cls, settings: Settings, directory: Path | None = None, *, create: bool = True) -> "SessionManager":
        """Open the sessions folder (paths.sessions_dir() by default). Raises SessionError for a
        database that is unwritable, damaged or from a newer chatapp. Without `create`
        (read-only commands) nothing is written."""
        store = SessionStore.open(directory or paths.sessions_dir(), create=create)
        manager = cls(store, settings.state_cap_mb * MIB)
        if create:
            clean_temp_files(manager.states_dir)
            if store.was_empty:
                manager.notices.append(f"the session database {store.path} was empty (0 bytes); started a new one")
            manager.notices += manager.clean_orphans()
        return manager

    def clean_orphans(self) -> list[str]:
        """Remove state files no session refers to (left by an emptied or replaced database, or a
        crash between removing a session and its state). Returns what it did, in words."""
        removed: list[str] = []
        failed: list[str] = []

        def clean(keys: set[str]) -> None:
            for state in list_states(self.states_dir, SUFFIX):
                if state.path.name.removesuffix(SUFFIX).split("-")[0] in keys:
                    continue
                try:
                    state.path.unlink()
                    removed.append(state.path.name)
                except FileNotFoundError:
                    pass
                except OSError as exc:
                    failed.append(f"{state.path} ({exc.strerror or exc})")

        if list_states(self.states_dir, SUFFIX):
            self.store.with_state_keys(clean)
        notices = [f"removed {len(removed)} KV state file(s) that no saved session refers to"] if removed else []
        notices += [f"cannot remove the orphaned KV state file {problem}" for problem in failed]
        return notices

    def state_path(self, state_key: str, leaf: str | None = None) -> Path:
        """The KV-state file of a session's branch leaf (without `leaf`: the one file a session had
        before conversations were trees). A key read from the database names a file only when
        it is one chatapp writes: an edited one ("../../tmp/evil") raises SessionError instead
        of becoming a path outside the states folder; a leaf id is checked the same way."""
        if not valid_state_key(state_key):
            raise SessionError(f"the state key {one_line_text(str(state_key))!r} in the session database "
                               "is not one chatapp writes")
        if leaf is None:
            return self.states_dir / f"{state_key}{SUFFIX}"
        if not is_id(leaf):
            raise SessionError(f"the message id {one_line_text(str(leaf))!r} is not one chatapp writes")
        return self.states_dir / f"{state_key}-{leaf}{SUFFIX}"

    def active_state_path(self, stored: StoredSession) -> Path:
        """The state file of a stored session's active leaf (the one file a session had before
        trees, for a session saved without a leaf)."""
        return self.state_path(stored.state_key, stored.leaf) if stored.leaf else self.state_path(stored.state_key)

    def state_paths(self, state_key: str) -> list[Path]:
        """Every KV-state file of a session: its leaves' and the one from before trees."""
        return [state.path for state in list_states(self.states_dir, SUFFIX)
                if state.path.name.removesuffix(SUFFIX).split("-")[0] == state_key]

    def state_size(self, state_key: str) -> int | None:
        """The bytes of every KV-state file the session keeps (its leaves'), None for none."""
        try:
            self.state_path(state_key)
            sizes = [path.stat().st_size for path in self.state_paths(state_key)]
        except (OSError, SessionError):
            return None
        return sum(sizes) if sizes else None

    def delete(self, name: str) -> None:
        """Remove the session and its state file together: if the file can't be removed, the
        session stays and SessionError says why."""
        def remove_state(key: str) -> None:
            self.state_path(key)  # an edited key names no file
            for path in self.state_paths(key):
                try:
                    path.unlink()
                except FileNotFoundError:
                    pass
                except OSError as exc:
                    raise SessionError(f"cannot remove the KV state file {path} ({exc.strerror or exc}); "
                                       f"session {name!r} was kept") from None

        self.store.delete(name, remove_state)

    def rename(self, old: str, new: str) -> None:
        self.store.rename(old, validate_name(new))

    def prefill_tps(self, engine: Engine, fingerprint: Fingerprint | None = None) -> float | None:
        """This machine's measured prefill speed for the engine's model, from saved turns."""
        fingerprint = fingerprint or engine.fingerprint()
        return self.store.prefill_speed(model_id(fingerprint), engine.summary.backend)

    def name_for(self, question: str) -> str:
        """A free name for a new chat, from its first question (`names.name_from`): how the TUI and
        `ask` name every chat they keep. Only the question's start is read: a name is its first
        line's first words, and a pasted question may be megabytes."""
        return name_from(question[:4096], self.store.has)

    # --- resume ----------------------------------------------------------------------
    def resume(self, name: str, engine: Engine, *, system_prompt: str | None = None,
               stop: threading.Event | None = None, new: bool = False) -> "LiveSession":
        """Load session `name` into the engine's chat, restoring its KV cache when the saved
        state is valid and leaving the cache empty otherwise. An unknown name starts a new
        session from the chat as it stands; it is written on the first save.

        When the state is not used, the next turn prefills its whole prompt anyway, so the
        context window is placed again for the engine's n_ctx first: turns that a run with a
        smaller context dropped come back when they fit now, turns that no longer fit leave,
        and the report says how many, and how many tokens the next turn prefills before its
        question. (A state that loads was saved under this n_ctx, for the window as saved.)
        Only the turns that could fit are tokenized (chatapp.engine.sessions.window), so a
        transcript far larger than the context opens in the time its context takes.
        `system_prompt` (the command line's), when it differs from the session's, replaces it
        from this turn on; the state starts with the old one, so it is not used. `stop`, once
        set (Ctrl+C), makes the opening raise OpeningStopped at its next step. `new`: a chat kept
        under a name chosen for it (`names.name_from`), which never joins another chat's session:
        if the name is taken by the first save, that save takes the next free one."""
        validate_name(name)
        stored = None if new else self.store.load(name)
        _check(stop, name)
        live = LiveSession(self, name, engine, stored.revision if stored else None, new=new)
        if stored is None:  # a new session starts from the chat as it is (and its cache)
            live.report = ResumeReport(name, created=True, messages=len(engine.messages))
            live.state_key = ""
            live.attach()
            return live
        live.saved_model = stored.model
        engine.clear_cache()
        n_system = 1 if stored.messages and stored.messages[0].role == "system" else 0
        tree, image_notices = _with_images(engine, stored)
        engine.load_conversation(tree, stored.window_start, stored.leaf)
        records = self.store.records_by_message(name)
        engine.remember_reply_probs({mid: probs_from_json(record.get("logprobs")) for mid, record in records.items()})
        engine.remember_decoded({mid: record.get("reply_as_decoded") or "" for mid, record in records.items()})
        engine.remember_decoded_ids({mid: record["reply_ids_as_decoded"] for mid, record in records.items()
                                     if record.get("reply_ids_as_decoded")})
        live.seen = frozenset(m.id for m in stored.tree if m.id)
        live.state_key = stored.state_key if valid_state_key(stored.state_key) else None
        live.attach()
        system_changed = system_prompt is not None and system_prompt != engine.system_prompt
        if system_changed:
            engine.set_system_prompt(system_prompt or "")
        saved_window, floor = engine.window_start, earliest_start(engine.messages, engine.n_ctx)
        if saved_window < floor:  # the saved window holds more text than the context can: skip it
            engine.place_window(floor)
        engine.set_attachments(stored.attachments)  # sized for this model: it retrieves as before
        notices = (*stored.notices, *image_notices)
        if stored.attachments:
            names = ", ".join(a.name for a in stored.attachments)
            notices = (f"{len(stored.attachments)} attachment{'s' if len(stored.attachments) != 1 else ''} "
                       f"restored: {names}", *notices)
        _check(stop, name)
        started = time.perf_counter()
        if system_changed:  # the state's tokens start with the old system prompt: none of it is reusable
            restored, reason = 0, "the system prompt changed"
        elif saved_window < floor:
            restored, reason = 0, "the transcript from its saved window on is longer than the context can hold"
        else:
            restored, reason = self._restore(live, stored, engine.prompt_ids())
        restore_ms = (time.perf_counter() - started) * 1000
        _check(stop, name)
        if restored:
            estimate = reprefill_estimate(restored, self.prefill_tps(engine, live.fingerprint))
            live.report = ResumeReport(name, False, len(stored.messages), restored_tokens=restored,
                                       restore_ms=restore_ms, estimate_s=estimate, notices=notices)
        else:
            has_turns = len(stored.messages) > n_system
            turns_back = refit_from(engine, floor, saved_window)
            _check(stop, name)
            # Nothing is cached: the next turn prefills all of its prompt, which starts with these.
            reprefill = len(engine.prompt_ids(add_generation_prompt=False)) if has_turns else 0
            live.report = ResumeReport(name, False, len(stored.messages), fallback=reason if has_turns else None,
                                       reprefill_tokens=reprefill, notices=notices, turns_back=turns_back,
                                       system_changed=system_changed)
        live.pending = live.report
        return live

    def fork(self, engine: Engine, name: str) -> "LiveSession":
        """A new session `name` holding only the engine's shown path (its ids kept), which the
        engine then continues in; the cache goes with it, since it holds that path."""
        validate_name(name)
        if self.store.load(name) is not None:
            raise SessionError(f"a session named {name!r} already exists")
        engine.load_conversation(engine.messages, engine.window_start, engine.leaf)
        live = LiveSession(self, name, engine)
        live.state_key = ""
        live.attach()
        report = live.save_now(force=True)
        live.report = ResumeReport(name, created=True, messages=len(engine.messages), notices=tuple(report.notices))
        return live

    def _restore(self, live: "LiveSession", stored: StoredSession, expected: list[int]) -> tuple[int, str]:
        engine = live.engine
        try:
            path = self.active_state_path(stored)
            if not path.exists():
                path = self.state_path(stored.state_key)  # written before conversations were trees
            if not path.exists() and stored.leaf:  # the leaf kept none: the kept state nearest to it
                kept, _ = engine.restore_nearest()
                if kept:
                    return kept, ""
            state = read_state(path)
        except SessionError as exc:  # an edited key: no file is looked for (the next save gives a new one)
            return 0, exc.message
        except StateRejected as exc:
            return 0, str(exc)
        reason = self.unusable(live, state)
        if reason:
            return 0, reason
        valid = state.n_valid
        if valid == 0:
            return 0, "the state holds no tokens of this transcript"
        if valid > len(expected) or state.tokens[:valid] != expected[:valid]:
            at = common_prefix(state.tokens[:valid], expected)
            return 0, f"token mismatch: the state differs from the transcript at token {at:,}"
        if not engine.restore_cache(CacheState(state.tokens, state.payload, state.fingerprint), valid):
            loader = 'llama.cpp' if engine.summary.kind == 'in-process' else 'llama-server'
            return 0, f"{loader} could not load the state"
        touch(path)
        return valid, ""

    @staticmethod
    def unusable(live: "LiveSession", state: StateFile) -> str:
        """Why a state file can't be loaded into this engine ("" when it can): another model,
        context or build, or NaN in its cache. Its tokens are checked by the caller."""
        try:
            current = live.fingerprint
        except OSError as exc:
            return f"cannot fingerprint the model ({exc.strerror or exc})"
        reason = mismatch(state.fingerprint, current)
        if reason:
            return reason
        if state.payload and (where := non_finite(state.payload)):  # llama.cpp would load it, then answer NaN
            return f"its cache holds NaN or infinite values ({where}), which make every logit NaN"
        return ""

    def write_branch(self, state_key: str, leaf: str, state: CacheState, fingerprint: Fingerprint) -> list[str]:
        """Keep a branch leaf's cache (one the engine stashed on leaving it) as a state file, under
        state_cap_mb with every other; returns notices."""
        if self.cap_bytes <= 0 or not state.tokens:
            return []
        path = self.state_path(state_key, leaf)
        staged = temp_path(path)
        try:
            make_private_dir(self.states_dir)
            meta = {**fingerprint, **state.meta}
            atomic_write(staged, encode_state(StateFile(meta, state.tokens, len(state.tokens), state.payload)))
            os.replace(staged, path)
            evict_lru(self.states_dir, SUFFIX, self.cap_bytes, _owner)
        except OSError as exc:
            return [f"branch KV state not saved ({disk_problem(self.states_dir) or exc.strerror or exc})"]
        finally:
            with contextlib.suppress(OSError):
                staged.unlink(missing_ok=True)
        return []

    # --- save ------------------------------------------------------------------------
    def write_state(self, saved: Saved, engine: Engine, fingerprint: Fingerprint) -> SaveReport:
        """Write the engine's KV cache as the state of the session's active leaf (under its stored
        id), if the session is still at the revision `saved` wrote when the file is put in place."""
        leaf = saved.leaf if saved.leaf is not None else engine.leaf
        path = self.state_path(saved.state_key, leaf) if leaf else self.state_path(saved.state_key)
        kv = engine.cached_tokens()
        if not kv or self.cap_bytes <= 0:  # nothing cached (an older state would only mislead), or none kept
            with contextlib.suppress(OSError):
                self.store.if_current(saved.revision, lambda: path.unlink(missing_ok=True))
            return SaveReport(None, notices=[] if not kv else ["KV state not kept: state_cap_mb is 0"])
        staged = temp_path(path)
        try:
            make_private_dir(self.states_dir)
            cache = engine.path_cache(saved.state_key)  # the path's cells only, never text typed ahead
            valid = common_prefix(cache.tokens, engine.prompt_ids())
            meta = {**fingerprint, **cache.meta}
            size = atomic_write(staged, encode_state(StateFile(meta, cache.tokens, valid, cache.payload)))
            installed = self.store.if_current(saved.revision, lambda: os.replace(staged, path))
            if installed:  # on disk before any state it replaces is removed (prune_states)
                fsync_dir(self.states_dir)
            evicted = evict_lru(self.states_dir, SUFFIX, self.cap_bytes, _owner) if installed else []
        except OSError as exc:
            problem = disk_problem(self.states_dir) or exc.strerror or str(exc)
            return SaveReport(None, notices=[f"KV state not saved ({problem}); the transcript is saved"])
        except ServerError as exc:  # a server can go away between the turn and its save
            return SaveReport(None, notices=[f"KV state not saved ({exc}); the transcript is saved"])
        finally:
            with contextlib.suppress(OSError):
                staged.unlink(missing_ok=True)
        if not installed:
            return SaveReport(None, notices=["KV state not saved: another process saved the session meanwhile"])
        if path in evicted:
            return SaveReport(None, notices=[f"KV state not kept: {size / MIB:,.1f} MiB is over the "
                                             f"{self.cap_bytes / MIB:,.0f} MiB state cap (state_cap_mb)"])
        notices = [f"removed {len(evicted)} other session(s)' KV state to stay under state_cap_mb "
                   f"({self.cap_bytes / MIB:,.0f} MiB)"] if evicted else []
        return SaveReport(None, state_bytes=size, state_tokens=valid, notices=notices)

    def prune_states(self, saved: Saved, keep: set[str]) -> list[str]:
        """Remove the session's state files that nothing uses any more: those of messages gone
        from its tree (a deleted branch), and of messages that are no longer leaves (a turn went
        on after them), except the active leaf's and `keep`'s (the path this process shows). A
        path end whose own state is not (yet) on disk keeps the nearest state on its path.

        Runs after a save, under the database's write lock and against the tree as committed:
        the transcript first, then the active leaf's state, then this. A kill -9 anywhere leaves
        the active leaf its own state, or, before that is installed, the one its path's last save
        wrote, which a resume restores and prefills on from (`_restore`). Returns notices."""
        key = saved.state_key
        if not valid_state_key(key):
            return []

        def prune(parents: dict[str, str | None], active: str | None) -> None:
            on_disk = {path.name.removesuffix(SUFFIX).removeprefix(key).removeprefix("-"): path
                       for path in self.state_paths(key)}
            wanted = set(parents) - set(parents.values())
            for end in {active, *keep} - {None}:
                wanted.add(_nearest_on_disk(end, parents, on_disk))
            if active is None or active not in on_disk:
                wanted.add("")  # the one file of a session saved before trees: still its state
            for leaf, path in on_disk.items():
                if leaf not in wanted:
                    with contextlib.suppress(OSError):
                        path.unlink()

        try:
            self.store.with_tree(saved.revision.session_id, prune)
        except SessionError as exc:  # the database is busy or gone: the next save tidies up
            return [f"stale KV states not removed ({exc.message})"]
        return []


class LiveSession:
    """One open session bound to one engine. Safe to save from a worker thread."""

    def __init__(self, manager: SessionManager, name: str, engine: Engine,
                 revision: Revision | None = None, *, new: bool = False) -> None:
        self.manager: SessionManager = manager
        self.name: str = name
        self.engine: Engine = engine
        self.revision: Revision | None = revision
        """The session's row and revision as this process last read or wrote it; None until the
        first save of a session that didn't exist."""
        self.report: ResumeReport = ResumeReport(name, created=True, messages=0)
        self.pending: ResumeReport | None = None
        """The resume figures, until the first turn's record carries them."""
        self.saved_model: ModelIdentity | None = None
        """The model the session was last saved with, when it was opened from the database."""
        self._fingerprint: Fingerprint | None = None
        self._lock = threading.Lock()
        self._saved: SavedKey | None = None
        """What the last save wrote (name, messages, window, cache size), to skip a repeat."""
        self.seen: frozenset[str] | None = None
        """The message ids this process last read or wrote: which stored messages it has seen."""
        self.state_key: str | None = None
        """The session's state key once known (read on resume, or given by the first save)."""
        self._branches: dict[str, CacheState] = {}
        """Branch states the engine stashed since the last save, written after the turn."""
        self._stored_ids: dict[str, str] = {}
        """This chat's message ids that the session stores under another (the same messages,
        saved first by another process that built them apart): state files take the stored id."""
        self._branched: set[str] = set()
        """The first messages of the branches this chat made on purpose (a --branch-from question,
        an edit, a regenerated reply): siblings of what another process adds there, never a conflict."""
        self.new = new
        """A chat kept under a name chosen for it: its first save takes the next free name if
        another chat took this one meanwhile (SessionStore.save's `new`)."""

    def moved_to(self, engine: Engine) -> "LiveSession":
        """The same session, continued with another engine (after a model switch)."""
        moved = LiveSession(self.manager, self.name, engine, self.revision, new=self.new)
        moved.seen, moved.state_key, moved._stored_ids = self.seen, self.state_key, dict(self._stored_ids)
        moved._branched = set(self._branched)
        moved.attach()
        return moved

    def attach(self) -> None:
        """Keep the engine's branch states with this session (memory, then state files)."""
        self.engine.keep_branches_with(self, self.state_key or None)

    # --- the engine's BranchKeeper ------------------------------------------------------------
    def _stored(self, leaf: str) -> str:
        return self._stored_ids.get(leaf, leaf)

    def keep_branch(self, leaf: str, state: CacheState) -> None:
        """Written by the next save, never on the way to a turn; a leaf whose file exists is not
        written again (a leaf's path never changes, so neither does the cache of it)."""
        if self.state_key and is_id(leaf) and self.manager.state_path(self.state_key, self._stored(leaf)).exists():
            return
        self._branches[leaf] = state

    def load_branch(self, leaf: str) -> CacheState | None:
        if not self.state_key or not is_id(leaf):
            return None
        try:
            path = self.manager.state_path(self.state_key, self._stored(leaf))
            state = read_state(path)
        except (SessionError, StateRejected, OSError):
            return None
        if self.manager.unusable(self, state):
            return None
        touch(path)
        return CacheState(state.tokens[:state.n_valid], state.payload, state.fingerprint)

    def kept_branches(self) -> list[str]:
        if not self.state_key or not valid_state_key(self.state_key):
            return []
        prefix, mine = f"{self.state_key}-", {stored: leaf for leaf, stored in self._stored_ids.items()}
        return [mine.get(leaf, leaf) for path in self.manager.state_paths(self.state_key)
                if is_id(leaf := path.name.removesuffix(SUFFIX).removeprefix(prefix))]

    def drop_branches(self, leaves: set[str]) -> None:
        """A deleted branch's states are not written; its files go with the save that commits the
        deletion (`SessionManager.prune_states`), never before: until then the database holds it."""
        for leaf in leaves:
            self._branches.pop(leaf, None)

    def _write_branches(self) -> list[str]:
        """Write the states the engine stashed of leaves left since the last save; one of a
        message that is no longer a leaf (a turn went on after it) is of no use and not written."""
        pending, self._branches = self._branches, {}
        if not self.state_key:
            return []
        tree, shown = self.engine.tree, self.engine.leaf
        notices: list[str] = []
        for leaf, state in pending.items():
            if leaf == shown or (leaf in tree and not tree.children(leaf)):
                notices += self.manager.write_branch(self.state_key, self._stored(leaf), state, self.fingerprint)
        return notices

    def changed_elsewhere(self) -> SessionConflict | None:
        """What another process did to this session that would make the next save refuse (it
        saved turns this chat doesn't hold: SessionConflict; it removed the session:
        SessionRemoved), not raised; None when the next save can go ahead. A rename in another
        process is followed here."""
        store = self.manager.store
        if self.revision is not None:
            now = store.current(self.revision.session_id)
            if now is None:
                return SessionRemoved(f"session {self.name!r} was removed by another process")
            self.name = now[0]
            if now[1] == self.revision.number:
                return None
        stored = store.load(self.name)
        if stored is None:
            return None
        mine = self._snapshot_messages()
        try:
            plan_save(stored.tree, mine, current=False, seen=self.seen)
        except Conflict:
            return SessionConflict(f"session {self.name!r} was changed by another process")
        # The next turn adds after the shown leaf: another process that added there already
        # would make its save refused, so it is said now, before the turn runs.
        held = {m.id for m in mine}
        leaf = self.engine.leaf
        if any(m.parent == leaf and m.id not in held and m.role != "system" for m in stored.tree):
            return SessionConflict(f"session {self.name!r} was changed by another process")
        return None

    def _snapshot_messages(self) -> list[Message]:
        return self.engine.transcript()

    @property
    def fingerprint(self) -> Fingerprint:
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

    def save_now(self, *, force: bool = False) -> SaveReport:
        """Save the transcript and KV state as they are (on quit, after a stop, or any time).
        Unless `force`, nothing is written when both are as this session last saved them:
        quitting right after a turn's autosave costs no second KV-state write."""
        return self._save(None, force=force)

    def _note_branch(self, record: TurnRecord) -> None:
        extra = record.extra
        first = {"branch": extra.get("parent_id"), "edit": extra.get("parent_id"),
                 "regenerate": extra.get("message_id")}.get(str(extra.get("action")))
        if is_id(first):
            self._branched.add(first)

    def _what_is_saved(self) -> SavedKey:
        engine = self.engine
        return self.name, tuple(self._snapshot_messages()), engine.leaf, engine.window_start, engine.kv_used()

    def _save(self, record: TurnRecord | None, *, force: bool = False) -> SaveReport:
        with self._lock:
            started = time.perf_counter()
            if record is None and not force and self._saved == self._what_is_saved():
                return SaveReport(None)
            engine = self.engine
            summary, messages = engine.summary, engine.messages
            fingerprint = self.fingerprint
            identity = ModelIdentity(summary.name, summary.path, model_id(fingerprint), summary.quant or "")
            turn = None
            if record is not None:
                record = self.annotate(record)
                self._note_branch(record)
                data = record.to_json()
                data.update(model=summary.name, quant=summary.quant, backend=summary.backend,
                            kv_type=summary.kv_type, threads=data.get("threads", summary.threads),
                            layers_offloaded=summary.layers_offloaded)
                last = max((i for i, m in enumerate(messages) if m.role == "assistant"), default=-1)
                reply_id = record.extra.get("message_id") or (messages[last].id if last >= 0 else "")
                turn = TurnRow(last, summary.backend, record.prefill_tokens, record.prefill_ms, data, reply_id)
            messages = self._snapshot_messages()
            named = {sha for m in messages for sha in m.images}
            images = tuple((sha, engine.images.name(sha), data) for sha, data in engine.images.items() if sha in named)
            snapshot = Snapshot(self.name, identity, messages, engine.window_start, engine.kv_used(),
                                tuple(plan.attachment for plan in engine.attachments), engine.leaf, images)
            first = self.revision is None
            saved = self.manager.store.save(snapshot, turn, base=self.revision, seen=self.seen,
                                            branched=frozenset(self._branched), new=self.new and first)
            self.revision, self.seen = saved.revision, (self.seen or frozenset()) | saved.ids
            self._stored_ids.update(saved.remap)
            self._branched.clear()  # stored now: no longer new, so never in a conflict again
            if self.state_key != saved.state_key:
                self.state_key = saved.state_key
                self.engine.keep_branches_with(self, saved.state_key)
            notices = []
            if saved.name != self.name:
                notices.append(f"{self.name!r} was taken by another chat meanwhile; kept as {saved.name!r}"
                               if self.new and first else
                               f"session {self.name!r} was renamed to {saved.name!r} by another process; "
                               "saved under the new name")
                self.name = saved.name
                if record is not None:
                    record = replace(record, extra={**record.extra, "session": saved.name})
            state = self.manager.write_state(saved, engine, fingerprint)
            notices += self._write_branches()
            # Only now, with the transcript committed and the active leaf's state in place:
            notices += self.manager.prune_states(saved, {saved.leaf} if saved.leaf else set())
            self._saved = self._what_is_saved()
            return replace(state, record=record, notices=notices + state.notices,
                           save_ms=(time.perf_counter() - started) * 1000)


def _owner(path: Path) -> str:
    """The state key a state file belongs to (its session)."""
    return path.name.removesuffix(SUFFIX).split("-")[0]


def _nearest_on_disk(end: str, parents: dict[str, str | None], on_disk: dict[str, Path]) -> str:
    """`end` if its state is on disk, else the deepest message before it on its path whose state
    is (`end` when none is). Stops at a loop (an edited parent) rather than circling."""
    node: str | None = end
    seen: set[str] = set()
    while node is not None and node not in on_disk and node not in seen:
        seen.add(node)
        node = parents.get(node)
    return node if node is not None and node in on_disk else end


def _check(stop: threading.Event | None, name: str) -> None:
    if stop is not None and stop.is_set():
        raise OpeningStopped(f"stopped while opening session {name!r}; nothing was sent or saved")


def _with_images(engine: Engine, stored: StoredSession) -> tuple[list[Message], list[str]]:
    """The saved tree, its images given to the engine again (read, not encoded: a restored state
    holds their cells). Images this model cannot read are left out of the messages, and said."""
    lost: list[str] = []
    for _, name, data in stored.images:
        try:
            engine.add_image(data, name)
        except ChatappError as exc:
            lost.append(f"image {name} left out: {exc.one_line()}")
    named = {sha for m in stored.tree for sha in m.images}
    missing = {sha for sha in named if sha not in engine.images}
    if not missing:
        return stored.tree, lost
    if unsaved := len(named - {sha for sha, _, _ in stored.images}):
        lost.append(f"{unsaved} image(s) the session names were not saved with it; left out")
    return [replace(m, images=tuple(s for s in m.images if s not in missing)) for m in stored.tree], lost
