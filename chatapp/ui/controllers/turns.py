"""Run a turn on the turn's worker, and turn its engine events into the UI's messages.

`run_turn` starts the engine's turn for a `TurnHow` (a new question, or one that branches) and
streams it (`stream_turn`). It runs on a worker thread: it iterates the generator, which is
where llama.cpp does its work, and only ever calls `post`, which is thread-safe. Reply text is coalesced: at most one
ReplyProgress per `interval` seconds, and always the last one before TurnFinished.
`annotate`, when given, turns the record into the one to post (the session's name and
restore figures); `finish` then gets it on this thread after TurnFinished is posted (the
app autosaves there), so the screen shows the end of a turn without waiting for the disk.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Literal

from textual.message import Message
from textual.worker import get_current_worker

from chatapp.engine.chat.branch_states import BranchFigures
from chatapp.engine.chat.engine import Engine
from chatapp.engine.chat.tool_turns import ToolCallDone
from chatapp.engine.events import (
    ContextRetrieved, ContextTrimmed, Event, PrefillDone, PrefillProgress, TextDelta, ThoughtDelta, TurnDone)
from chatapp.engine.stats import TurnRecord
from chatapp.engine.tokens import Token, common_prefix
from chatapp.errors import ChatappError, ContextFullError, InputError, ServerError
from chatapp.ui.messages import (
    BranchChanged, PrefillFinished, PrefillProgressed, ReplyProgress, ThoughtProgress, ToolStep, TurnFailed,
    TurnFinished, TurnRetrieved, TurnStarted, TurnTrimmed)
from chatapp.ui.shown import shown_path

if TYPE_CHECKING:
    from chatapp.engine.sessions import LiveSession
    from chatapp.engine.chat.tool_turns import ToolTurns
    from chatapp.ui.host import EngineGate

TurnAction = Literal["send", "regenerate", "edit", "branch", "token", "think"]

@dataclass(frozen=True)
class TurnHow:
    """How a turn starts: a new question at the end, or one that branches."""

    action: TurnAction = "send"
    target: str | None = None
    """edit: the question edited; branch: the reply it follows; regenerate, token, think: the reply (None: the last)."""
    step: int = -1
    """token: where the new reply leaves the old, as the index of the reply's token (among those
    with probabilities, the confidence view's) that it replaces; think: how many more thought tokens."""
    token: int = -1
    """token: the token id it takes there instead."""
    images: tuple[str, ...] = ()
    """send: the images the new question is about, by hash (attached in the TUI, chatapp.engine.images)."""


SEND = TurnHow()


def start_events(engine: Engine, text: str, how: TurnHow, since: float | None = None) -> Iterator[Event]:
    """The engine's turn for `how` (on the turn worker: the tree changes here); `since`: when the
    user sent it (time.perf_counter()), for a new question's ttft_ms."""
    if how.action == "regenerate":
        return engine.regenerate(how.target)
    if how.action == "token":
        return engine.branch_at_step(how.target or "", how.step, how.token)
    if how.action == "think":  # think more: beside the reply, its thought gone on with
        return engine.think_more(how.step, how.target)
    if how.action == "edit":
        return engine.edit(how.target or "", text)
    if how.action == "branch":
        return engine.send_after(how.target or "", text)
    return engine.send(text, images=how.images, since=since)


PROGRESS_INTERVAL = 0.15
"""Seconds between ReplyProgress messages: about seven a second (the Speed panel needs at
least five), whatever the decode speed; each update costs the UI thread CPU that decode
would otherwise get."""


DECODE_SWITCH_INTERVAL = 0.0001
"""Seconds the UI thread may keep the GIL while the decode worker waits for it, during a turn.

The worker gives up the GIL at every llama.cpp call; whenever the UI thread is painting just
then, Python's default 5 ms interval left decode waiting up to 5 ms per call. Measured with
`benchmarks/tui_speed.py` (since retired; it is in git history): the decode thread was on a CPU
86-93% of a turn's wall time at 5 ms, 95-99% at 0.5 ms and 96-99% at 0.1 ms, against 99-100%
with no UI thread at all."""


@contextmanager
def decode_gets_the_gil(interval: float = DECODE_SWITCH_INTERVAL):
    """Shorten the interpreter's switch interval (a process-wide setting) for the `with` block."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(min(before, interval))
    try:
        yield
    finally:
        sys.setswitchinterval(before)


class ReplyTokens:
    """The running reply's tokens, read from the cache as it grows (the worker holds the engine
    between events), each new id described once; a cache that shrank (a draft taken back) or
    changed below is read again from where it differs."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self._start: int | None = None
        self._ids: list[int] = []
        self._tokens: list[Token] = []

    def started(self, prompt_tokens: int) -> None:
        self._start, self._ids, self._tokens = prompt_tokens, [], []

    def now(self) -> tuple[Token, ...]:
        if self._start is None:
            return ()
        ids = self._engine.cached_tokens()[self._start:]
        same = common_prefix(ids, self._ids)
        if same < len(ids) or same < len(self._ids):
            self._tokens[same:] = self._engine.describe(ids[same:])
            self._ids = ids
        return tuple(self._tokens)


def stream_turn(engine: Engine, events: Iterator[Event | ToolCallDone], post: Callable[[Message], object], *,
                cancelled: Callable[[], bool] = lambda: False, interval: float = PROGRESS_INTERVAL,
                clock: Callable[[], float] = time.monotonic,
                annotate: Callable[[TurnRecord], TurnRecord] | None = None,
                finish: Callable[[TurnRecord], object] | None = None) -> None:
    text, live, last_post, pending = "", None, float("-inf"), False
    thought, thought_tokens, thought_pending, thought_live = "", 0, False, None
    after_calls = False
    reply_tokens = ReplyTokens(engine)
    for event in events:
        if cancelled():
            engine.stop()  # the generator still finishes its turn cleanly, just sooner
        if after_calls and not isinstance(event, ToolCallDone):  # a tool loop's next step
            post(ToolStep())
            after_calls = False
        if isinstance(event, ThoughtDelta):  # a thinking model's thought, before its answer
            # the thought's tokens as the decode counts them, the count its record keeps (TurnSplit)
            thought, thought_tokens, thought_live = thought + event.text, event.live.decode_tokens, event.live
            now = clock()
            thought_pending = now - last_post < interval
            if not thought_pending:
                post(ThoughtProgress(thought, thought_tokens, thought_live, reply_tokens.now()))
                last_post = now
        elif isinstance(event, TextDelta):
            if thought_pending:  # the whole thought is drawn before the answer starts
                post(ThoughtProgress(thought, thought_tokens, thought_live, reply_tokens.now()))
                thought_pending = False
            text, live = text + event.text, event.live
            now = clock()
            pending = now - last_post < interval
            if not pending:
                post(ReplyProgress(text, live, reply_tokens.now()))
                last_post = now
        elif isinstance(event, PrefillProgress):
            post(PrefillProgressed(event))
        elif isinstance(event, PrefillDone):
            reply_tokens.started(event.prompt_tokens)
            post(PrefillFinished(event))
        elif isinstance(event, ContextTrimmed):
            post(TurnTrimmed(event))
        elif isinstance(event, ContextRetrieved):
            post(TurnRetrieved(event.context))
        elif isinstance(event, TurnDone):
            if pending and live is not None:
                post(ReplyProgress(text, live, reply_tokens.now()))
            record = event.record if annotate is None else annotate(event.record)
            calls = bool(record.extra.get("tool_calls"))
            path = shown_path(engine) if calls or record.extra.get("action") == "tool" else None
            post(TurnFinished(record, event.view, figures_of(engine) or record_figures(record), path,
                              more=calls and "tool_loop_end" not in record.extra))
            if finish is not None:
                finish(record)
            text, live, pending, thought, thought_tokens, thought_pending = "", None, False, "", 0, False
        elif isinstance(event, ToolCallDone):
            post(ToolStep(event.result.text, tool_note(event)))
            after_calls = True


def tool_note(done: ToolCallDone) -> str:
    """What a result's title says while its turn runs: the tool, and its tokens or why it did not run."""
    if not done.approved:
        return f"{done.call.name}: {done.why}"
    error = ", error" if done.result.error else ""
    return f"{done.call.name} ({done.server}) · {done.result_tokens} tok{error}"


def answer_now(gate: EngineGate) -> bool:
    """Stop thinking and answer: the running turn forces its thought's closing marker before its
    next sampled token (chatapp.engine.thinking). Called on the UI thread while the turn's worker
    holds the turn lock: the engine's answer_now is thread-safe, so the lock is not taken.
    False when no thought is being written."""
    return False if gate.released else gate.engine.answer_now()


def record_figures(record: TurnRecord) -> BranchFigures:
    """The leaf's figures as the turn's own record gives them, for when the engine cannot count
    them now (a llama-server gone at the end of the reply): every cell in use is the branch's."""
    return BranchFigures(record.extra.get("message_id"), record.kv_used, record.kv_used, record.kv_used, record.n_ctx)


def figures_of(engine: Engine) -> BranchFigures | None:
    """The shown leaf's figures after a turn failed, or None when the engine cannot give them now
    (a server that went away): the panels then keep what they showed."""
    try:
        return engine.branch_figures()
    except (ChatappError, OSError, RuntimeError, ValueError):
        return None


def run_turn(gate: EngineGate, post: Callable[[Message], object], text: str, how: TurnHow = SEND,
             since: float | None = None, live: LiveSession | None = None,
             autosave: Callable[[LiveSession, TurnRecord], object] | None = None,
             keep: Callable[[Engine, str], LiveSession | None] | None = None,
             tools: Callable[[Engine, Callable[[], bool]], ToolTurns | None] | None = None) -> None:
    """The turn's worker: the engine's turn for `how`, streamed as messages, the session `live`
    saved after it (`autosave`). With no session, `keep` makes the chat one first. `tools(engine,
    cancelled)` gives the turn's tool loop (chatapp.engine.chat.tool_turns), None when tools are
    off. Whatever fails
    is posted as TurnFailed, never raised: the app must not stay "generating"."""
    worker = get_current_worker()
    with gate.turn() as engine:
        if engine is None:
            return
        if live is None and keep is not None:
            live = keep(engine, text)
        finish = partial(autosave, live) if live is not None and autosave is not None else None
        branching = how.action != "send"
        try:
            if not branching:
                post(TurnStarted(text, images=len(how.images)))
            turns = tools(engine, lambda: worker.is_cancelled) if tools is not None else None
            events = start_events(engine, text, how, since)
            if turns is not None:
                events = turns.run(lambda first=events: first)
            if branching:  # the path it continues, up to its question, is drawn before the reply
                post(TurnStarted(text, how.action in ("regenerate", "token", "think"), *shown_path(engine)))
            with decode_gets_the_gil():
                stream_turn(engine, events, post, cancelled=lambda: worker.is_cancelled,
                            annotate=live.annotate if live is not None else None, finish=finish)
        except ChatappError as exc:
            # A turn that never started gives its text back to the composer.
            refused = isinstance(exc, (ContextFullError, InputError, ServerError))
            post(TurnFailed(exc.one_line(), text, refused=refused, figures=figures_of(engine)))
            if branching and refused:  # the engine took the branch back: draw the path as it was
                post(BranchChanged(*shown_path(engine), engine.branch_figures()))
        except Exception as exc:  # noqa: BLE001 - whatever llama.cpp raises, the UI must not stay "generating"
            post(TurnFailed(f"{type(exc).__name__}: {exc}", text, figures=figures_of(engine)))
