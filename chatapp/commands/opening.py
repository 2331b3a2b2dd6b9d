"""A rich progress bar fed by the engine's plain (phase, done, total) callbacks, and the
tidying of the models folder that comes before a pull or a model load."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn, DownloadColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn, TimeRemainingColumn,
    TransferSpeedColumn,
)


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
    from chatapp.engine.server.http import display_url

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
