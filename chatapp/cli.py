"""The `chatapp` command line. Heavy imports (the engine, the UI) happen inside commands."""

from __future__ import annotations

import sys

import typer

from chatapp.errors import ChatappError

app = typer.Typer(
    name="chatapp",
    help="Chat with local LLMs in the terminal and watch how inference works.",
    no_args_is_help=False,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _register_subcommands() -> None:
    from chatapp.commands import bench as bench_cmd
    from chatapp.commands import config as config_cmd
    from chatapp.commands import models as models_cmd

    app.add_typer(models_cmd.app, name="models", help="List, inspect and pull GGUF models.")
    app.add_typer(config_cmd.app, name="config", help="Where the config file lives and what it holds.")
    app.add_typer(bench_cmd.app, name="bench", help="Measure this machine: memory bandwidth.")
    for optional in ("themes", "sessions"):
        try:
            module = __import__(f"chatapp.commands.{optional}", fromlist=["app"])
        except ModuleNotFoundError:
            continue
        app.add_typer(module.app, name=optional)


def fail(message: str, code: int = 2) -> None:
    """Print one clear line on stderr and exit."""
    print(f"chatapp: {message}", file=sys.stderr)
    raise SystemExit(code)


def main() -> None:
    _register_subcommands()
    from chatapp.commands import core  # noqa: F401  (registers chat, ask, tokenize)

    try:
        app(standalone_mode=True)
    except ChatappError as exc:
        fail(exc.one_line())
    except KeyboardInterrupt:
        fail("interrupted", code=130)
