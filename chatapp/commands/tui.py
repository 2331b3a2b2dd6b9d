"""`chatapp chat`: get the model, then start the TUI on it.

Kept apart from chatapp.ui.app so that the start can overlap its two slow halves: llama.cpp
loads the model on a thread (its C code runs without the GIL) while this thread imports
Textual and the app. Pulling a missing model happens first, in the foreground, so its
progress bar and Ctrl+C behave as in any other command.
"""

from __future__ import annotations

import sys
from concurrent.futures import ThreadPoolExecutor

from rich.console import Console
from rich.markup import escape

from chatapp.config import Settings
from chatapp.errors import ChatappError, InputError


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
            system: str | None = None) -> None:
    """Load (pulling the default model if missing) before the TUI starts, then run it. A session
    is resumed once the TUI is up (`system`, the --system given, replacing its system prompt),
    and saved again when it closes."""
    from chatapp.commands.opening import model_path, server_loading, tidy_models_dir
    from chatapp.engine.opening import load_engine, open_engine

    check_terminal()
    err = Console(stderr=True, highlight=False)
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
        tidy_models_dir(err)
        path = model_path(settings, model, err)
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="chatapp-load") as pool:
            loading = pool.submit(load_engine, settings, path)
            from chatapp.ui.app import ChatApp  # imported while the model loads

            engine = loading.result()
    app = ChatApp(engine, settings=settings, session=session, sessions=sessions, system_prompt=system,
                  opener=open_engine)
    try:
        app.run()
    finally:
        for problem in app.release_engine():
            err.print(f"[yellow]{escape(problem)}[/]")
    if app.return_code:
        raise ChatappError(f"the TUI stopped with an error (exit code {app.return_code})", title="TUI")
