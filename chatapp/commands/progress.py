"""A rich progress bar fed by the engine's plain (phase, done, total) callbacks, and the
tidying of the models folder that comes before a pull or a model load."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn, TransferSpeedColumn


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
    from chatapp.engine.pull_leftovers import clean_pull_leftovers

    for notice in clean_pull_leftovers(paths.models_dir()).notices():
        console.print(f"[yellow]{escape(notice)}[/]", soft_wrap=True)
