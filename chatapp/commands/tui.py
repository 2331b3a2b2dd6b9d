"""`chatapp chat`: get the model, then start the TUI on it.

Kept apart from chatapp.ui.app so that the start can overlap its two slow halves: llama.cpp
loads the model on a thread (its C code runs without the GIL) while this thread imports
Textual and the app. Pulling a missing model happens first, in the foreground, so its
progress bar and Ctrl+C behave as in any other command.

Quitting never waits on a worker stuck in llama.cpp: ChatApp.run does not join its thread
workers, release_engine waits a bounded time, and the process then ends without the stuck one.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from rich.markup import escape

from chatapp.commands.terminal import SafeConsole
from chatapp.config import Settings
from chatapp.errors import ChatappError, InputError
from chatapp.format import one_line_text

WORKER_GRACE = 0.1
"""Seconds the idle worker threads get to end after the app has closed its loop."""


def check_terminal() -> None:
    """The TUI reads keys from a terminal and draws on one; without, it would wait for ever."""
    for name, stream in (("input", sys.stdin), ("output", sys.stdout)):
        try:
            interactive = stream is not None and stream.isatty()
        except (ValueError, OSError):
            interactive = False
        if not interactive:
            raise InputError(f"the chat needs a terminal, and its {name} is not one; "
                             "in scripts and pipes use: chatapp ask PROMPT")


def run_app(settings: Settings, *, model: str | None = None, session: str | None = None,
            system: str | None = None, preset: str | None = None) -> None:
    """Load (pulling the default model if missing) before the TUI starts, then run it. A session
    is resumed once the TUI is up (`system`, the --system given, replacing its system prompt),
    and saved again when it closes."""
    from chatapp.commands.opening import model_choice, server_loading, tidy_models_dir
    from chatapp.engine.opening import load_engine, open_engine

    check_terminal()
    err = SafeConsole(stderr=True, highlight=False)
    sessions = None
    if session is not None:
        from chatapp.engine.sessions import SessionManager, validate_name

        validate_name(session)
        sessions = SessionManager.open(settings)  # before loading the model: a bad database fails fast
    if settings.server:  # the server's model: no pull, no load; a model still loading is waited for here
        with server_loading(err, settings.server) as waiting:
            engine = open_engine(settings, model, waiting=waiting)
        from chatapp.ui.app import ChatApp
    else:
        from chatapp.engine.models.projector import projector_for

        tidy_models_dir(err)
        path, name = model_choice(settings, model, err)
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="chatapp-load") as pool:
            loading = pool.submit(load_engine, settings, path, name, projector_for(model, path, settings.mmproj))
            from chatapp.ui.app import ChatApp  # imported while the model loads

            engine = loading.result()
    app = ChatApp(engine, settings=settings, session=session, sessions=sessions, system_prompt=system,
                  opener=open_engine, preset=preset)
    try:
        app.run()
    finally:
        for problem in app.release_engine():
            err.print(f"[yellow]{escape(one_line_text(problem))}[/]")
    failed = ChatappError(f"the TUI stopped with an error (exit code {app.return_code})", title="TUI") \
        if app.return_code else None
    if app.gate.abandoned or workers_left():
        # A worker still in a call that cannot be interrupted (llama.cpp) would hold the
        # interpreter's exit, which joins every thread, for as long as the call runs; what
        # could be saved has been, so end here without it.
        if failed is not None:
            err.print(f"chatapp: {escape(failed.one_line())}")
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(failed.exit_code if failed is not None else 0)
    if failed is not None:
        raise failed


def workers_left(grace: float = WORKER_GRACE) -> bool:
    """Whether a thread other than this one is still running after `grace` seconds: idle pool
    threads end at once once the app's loop is closed; one in the middle of a job does not."""
    deadline = time.monotonic() + grace
    others = [t for t in threading.enumerate() if t is not threading.current_thread() and not t.daemon]
    for thread in others:
        thread.join(max(deadline - time.monotonic(), 0.0))
    return any(thread.is_alive() for thread in others)
