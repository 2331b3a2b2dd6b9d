"""`chatapp chat`: get the model, then start the TUI on it.

Kept apart from chatapp.ui.app so that the start can overlap its two slow halves: llama.cpp
loads the model on a thread (its C code runs without the GIL) while this thread imports
Textual and the app. Pulling a missing model happens first, in the foreground, so its
progress bar and Ctrl+C behave as in any other command.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from rich.console import Console
from rich.markup import escape

from chatapp.config import Settings
from chatapp.errors import ChatappError


def run_app(settings: Settings, *, model: str | None = None, session: str | None = None) -> None:
    """Load (pulling the default model if missing) before the TUI starts, then run it. A session
    is resumed once the TUI is up, and saved again when it closes."""
    from chatapp.commands.progress import pull_progress, server_loading  # noqa: PLC0415
    from chatapp.engine.engine import Engine  # noqa: PLC0415
    from chatapp.engine.hardware import threads_beside_ui  # noqa: PLC0415
    from chatapp.engine.models import resolve_model  # noqa: PLC0415

    err = Console(stderr=True, highlight=False)
    sessions = None
    if session is not None:
        from chatapp.engine.sessions import SessionManager, validate_name  # noqa: PLC0415

        validate_name(session)
        sessions = SessionManager.open(settings)  # before loading the model: a bad database fails fast
    if settings.server:  # the server's model: no pull, no load; a model still loading is waited for here
        with server_loading(err, settings.server) as waiting:
            engine = Engine.open(settings, model, waiting=waiting)
        from chatapp.ui.app import ChatApp  # noqa: PLC0415
    else:
        if settings.threads == 0:  # auto: leave the UI a core of its own
            settings = settings.replace(threads=threads_beside_ui())
        with pull_progress(err) as progress:
            path = resolve_model(model, settings, progress=progress)
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="chatapp-load") as pool:
            loading = pool.submit(Engine.load, settings, path)
            from chatapp.ui.app import ChatApp  # noqa: PLC0415 - imported while the model loads

            engine = loading.result()
    app = ChatApp(engine, settings=settings, session=session, sessions=sessions)
    try:
        app.run()
    finally:
        for problem in app.release_engine():
            err.print(f"[yellow]{escape(problem)}[/]")
    if app.return_code:
        raise ChatappError(f"the TUI stopped with an error (exit code {app.return_code})", title="TUI")
