"""Stopping an attach part-way (Esc or Ctrl+Q in the TUI), all or nothing as ever.

Attaching runs through several layers that are not the caller's to change (the engine's
`add_attachments`, the attachment set, chunking), so the stop travels as a context variable
rather than as a parameter of each: the caller sets it around the whole job (`stoppable`), and
the long loops ask `check()` between steps, which raises `AttachStopped` once it is set. A
context variable is per thread, so a turn's retrieval on another thread never sees it.

What cannot be asked part-way is bounded instead: reading a PDF runs in a child process that
is killed (chatapp.engine.retrieval.pdf), and one tokenizer call covers one file of at most
8 MiB.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from chatapp.errors import AttachmentError

_stop: ContextVar[threading.Event | None] = ContextVar("chatapp_attach_stop", default=None)


class AttachStopped(AttachmentError):
    """The user stopped the attach; nothing was attached."""


@contextmanager
def stoppable(stop: threading.Event) -> Iterator[threading.Event]:
    """Run an attach that `stop.set()` (from any thread) ends at its next check."""
    token = _stop.set(stop)
    try:
        yield stop
    finally:
        _stop.reset(token)


def stopped() -> bool:
    event = _stop.get()
    return event is not None and event.is_set()


def check() -> None:
    """Raise AttachStopped when the attach running on this thread has been asked to stop."""
    if stopped():
        raise AttachStopped("stopped; nothing was attached")
