"""The CLI's one way of opening a model: settings from the config file and the options, the
model a spec names (pulled, with a progress bar, when it is missing), and the engine on it or
on a llama-server (chatapp.engine.opening builds it), with the models folder tidied first and
a spinner while a server is still loading.

The progress bars are rich's, fed by the engine's plain (phase, done, total) callbacks.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)

from chatapp.commands.terminal import SafeConsole
from chatapp.config import Settings, adjusted, load_settings
from chatapp.errors import ChatappError, InputError
from chatapp.format import display_url

if TYPE_CHECKING:  # the engine is imported once the arguments are checked
    from chatapp.engine.chat import Engine
    from chatapp.presets import Preset


def settings_with(**overrides) -> Settings:
    """The config file's settings with the command line's on top, as they will run; what that
    adjusts (threads capped, n_ctx rounded up) is said in one line on stderr."""
    settings, notices = adjusted(load_settings().replace(**overrides))
    if notices:
        print(f"chatapp: note: {'; '.join(notices)}", file=sys.stderr)
    return settings


def settings_with_preset(preset: str | None, model: str | None, session: str | None = None,
                         **overrides) -> tuple[Settings, Preset | None]:
    """`settings_with` for a command that chats: the command line's options over the preset over the
    config file. The preset is `preset` (--preset NAME), else the one the saved `session` last ran
    with, else the one whose `model` names the model the command will load (chatapp.presets).
    Returns the settings and the preset (None: none)."""
    from chatapp.engine.models.resolve import model_default_preset
    from chatapp.presets import load_presets

    base = load_settings()
    presets = load_presets()
    kept = _kept_preset(base, session) if preset is None and session is not None else ""
    if kept and kept not in presets.presets:
        print(f"chatapp: session {session!r} ran with preset {kept!r}, which is no longer there "
              f"({presets.problems.get(kept, 'see chatapp presets list')}); going on without it", file=sys.stderr)
        kept = ""
    if preset is None and kept:
        chosen = presets.get(kept)
        print(f"chatapp: preset {kept!r}, as session {session!r} was left", file=sys.stderr)
    elif preset is not None:
        chosen = presets.get(preset)
    else:
        chosen = model_default_preset(presets, model, base)
        if chosen is not None:
            print(f"chatapp: preset {chosen.name!r}: the default of this model ({chosen.source})", file=sys.stderr)
    if chosen is not None:
        base = chosen.apply(base)
    settings, notices = adjusted(base.replace(**overrides))
    if notices:
        print(f"chatapp: note: {'; '.join(notices)}", file=sys.stderr)
    return settings, chosen


def _kept_preset(settings: Settings, session: str) -> str:
    """The preset saved session `session` last ran with ("" for none, or no such session)."""
    from chatapp.engine.sessions import SessionManager

    try:
        return SessionManager.open(settings, create=False).store.choices(session).preset
    except (ChatappError, OSError):  # opening the session says what is wrong with it
        return ""


def session_to_open(session: str | None, continue_latest: bool) -> str | None:
    """The session `--session NAME` or `--continue` names: with `--continue`, the one used last
    (`sessions list`'s first, the TUI's last chat included), as `llm -c` continues its last
    conversation. InputError when both are given, or there is no session to continue."""
    if not continue_latest:
        return session
    if session is not None:
        raise InputError("--continue and --session both name a session: give one of them")
    from chatapp.engine.sessions import SessionManager

    newest = SessionManager.open(load_settings(), create=False).store.summaries()
    if not newest:
        raise InputError("--continue: there is no saved session yet (every chat, in the TUI or by ask, is kept "
                         "as one unless incognito)")
    print(f"chatapp: continuing session {newest[0].name!r}", file=sys.stderr)
    return newest[0].name


def open_engine(settings: Settings, model: str | None, console: Console | None = None) -> Engine:
    """The engine the settings ask for: a local model (pulled if missing) or a llama-server."""
    from chatapp.engine import opening

    console = console or SafeConsole(stderr=True)
    if not settings.server:
        tidy_models_dir(console)
    with pull_progress(console) as progress, server_loading(console, settings.server) as waiting:
        return opening.open_engine(settings, model, progress=progress, waiting=waiting)


def model_path(settings: Settings, model: str | None, console: Console) -> Path:
    """The local model file a spec names (see `resolve_model`), pulled with a progress bar if it
    is the catalog's and missing: for the commands that read a model without chatting with it."""
    return model_choice(settings, model, console)[0]


def model_choice(settings: Settings, model: str | None, console: Console) -> tuple[Path, str | None]:
    """`model_path`, and the store's name for it (see `resolve_named`), for `load_engine`."""
    from chatapp.engine.models.resolve import resolve_named

    with pull_progress(console) as progress:
        return resolve_named(model, settings, progress=progress)


@contextlib.contextmanager
def pull_progress(console: Console) -> Iterator[Callable[[str, int, int], None]]:
    progress = Progress(TextColumn("{task.description}"), BarColumn(), DownloadColumn(),
                        TransferSpeedColumn(), TimeRemainingColumn(), console=console, transient=False)
    tasks: dict[str, int] = {}

    def update(phase: str, done: int, total: int) -> None:
        if not progress.live.is_started:
            progress.start()
        if phase not in tasks:
            tasks[phase] = progress.add_task(phase, total=total or None)
        progress.update(tasks[phase], completed=done, total=total or None)

    try:
        yield update
    finally:
        if progress.live.is_started:
            progress.stop()


def tidy_models_dir(console: Console) -> None:
    """Remove what killed pulls left in the models folder; say what was removed and what could not be."""
    from chatapp import paths
    from chatapp.engine.models.pull_leftovers import clean_pull_leftovers

    for notice in clean_pull_leftovers(paths.models_dir()).notices():
        console.print(f"[yellow]{escape(notice)}[/]", soft_wrap=True)


@contextlib.contextmanager
def server_loading(console: Console, url: str) -> Iterator[Callable[[float], None]]:
    """For a llama-server still loading its model: a line saying so, then a spinner with the
    time waited so far (terminals only)."""
    what = f"llama-server at {display_url(url)} is loading its model"
    progress = Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(), console=console,
                        transient=True)
    task: list[int] = []

    def update(_elapsed: float) -> None:
        if not task:
            console.print(f"waiting: {what}", highlight=False, markup=False)
            if console.is_terminal:
                progress.start()
            task.append(progress.add_task(what, total=None))

    try:
        yield update
    finally:
        if progress.live.is_started:
            progress.stop()
