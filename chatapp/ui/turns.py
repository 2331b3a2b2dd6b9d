"""Turn an engine turn (a generator of events) into the UI's messages.

Runs on a worker thread: it iterates the generator, which is where llama.cpp does its work,
and only ever calls `post`, which is thread-safe. Reply text is coalesced: at most one
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

from textual.message import Message

from chatapp.engine.chat.engine import Engine
from chatapp.engine.events import (
    ContextRetrieved, ContextTrimmed, Event, PrefillDone, PrefillProgress, TextDelta, TurnDone)
from chatapp.engine.stats import TurnRecord
from chatapp.ui.messages import (
    PrefillFinished, PrefillProgressed, ReplyProgress, TurnFinished, TurnRetrieved, TurnTrimmed)

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


def stream_turn(engine: Engine, events: Iterator[Event], post: Callable[[Message], object], *,
                cancelled: Callable[[], bool] = lambda: False, interval: float = PROGRESS_INTERVAL,
                clock: Callable[[], float] = time.monotonic,
                annotate: Callable[[TurnRecord], TurnRecord] | None = None,
                finish: Callable[[TurnRecord], object] | None = None) -> None:
    text, live, last_post, pending = "", None, float("-inf"), False
    for event in events:
        if cancelled():
            engine.stop()  # the generator still finishes its turn cleanly, just sooner
        if isinstance(event, TextDelta):
            text, live = text + event.text, event.live
            now = clock()
            pending = now - last_post < interval
            if not pending:
                post(ReplyProgress(text, live))
                last_post = now
        elif isinstance(event, PrefillProgress):
            post(PrefillProgressed(event))
        elif isinstance(event, PrefillDone):
            post(PrefillFinished(event))
        elif isinstance(event, ContextTrimmed):
            post(TurnTrimmed(event))
        elif isinstance(event, ContextRetrieved):
            post(TurnRetrieved(event.context))
        elif isinstance(event, TurnDone):
            if pending and live is not None:
                post(ReplyProgress(text, live))
            record = event.record if annotate is None else annotate(event.record)
            post(TurnFinished(record, event.view))
            if finish is not None:
                finish(record)
