"""The `chatapp` command line. Heavy imports (the engine, the UI) happen inside commands."""

from __future__ import annotations

import sys

import typer

from chatapp.config import exposed_key_warning
from chatapp.errors import ChatappError
from chatapp.private import tighten_install

app = typer.Typer(
    name="chatapp",
    help="Chat with local LLMs in the terminal and watch how inference works.",
    no_args_is_help=False,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _register_subcommands() -> None:
    from chatapp.commands import config as config_cmd
    from chatapp.commands import core, neighbours
    from chatapp.commands import models as models_cmd

    core.register(app)
    app.command()(neighbours.neighbours)
    app.add_typer(models_cmd.app, name="models", help="List, inspect and pull GGUF models.")
    app.add_typer(config_cmd.app, name="config", help="Where the config file lives and what it holds.")
    for optional in ("themes", "sessions"):
        try:
            module = __import__(f"chatapp.commands.{optional}", fromlist=["app"])
        except ModuleNotFoundError:
            continue
        app.add_typer(module.app, name=optional)


def start_notices() -> list[str]:
    """What the CLI says, one line each, before a command runs: permissions it tightened, and
    an API key in a config file that others can read."""
    notices = [tighten_install().notice(), exposed_key_warning()]
    return [notice for notice in notices if notice]


def fail(message: str, code: int = 2) -> None:
    """Print one clear line on stderr and exit."""
    print(f"chatapp: {message}", file=sys.stderr)
    raise SystemExit(code)


def main() -> None:
    _register_subcommands()

    try:
        for notice in start_notices():  # files made private, a key others can read
            print(f"chatapp: {notice}", file=sys.stderr)
        app(standalone_mode=True)
    except ChatappError as exc:
        fail(exc.one_line())
    except KeyboardInterrupt:
        fail("interrupted", code=130)
