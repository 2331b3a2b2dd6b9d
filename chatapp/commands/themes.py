"""`chatapp themes`: the themes the app can use, and any user theme files that failed."""

from __future__ import annotations

import typer
from rich import box
from rich.style import Style
from rich.table import Table
from rich.text import Text

from chatapp import paths
from chatapp.commands.terminal import SafeConsole
from chatapp.config import load_settings

app = typer.Typer(no_args_is_help=True, add_completion=False, help="List the built-in and user themes.")

PALETTE = ("background", "surface", "panel", "foreground", "primary", "secondary", "accent")


@app.command("list")
def list_themes() -> None:
    """Show every theme with its colours; user theme files that failed are warned about."""
    # Textual is only needed here, so other commands start without it.
    from chatapp.ui.themes import CHATAPP_VARIABLES, load_themes

    configured = load_settings().theme
    result = load_themes()
    table = Table(box=box.SIMPLE_HEAD, caption=f"* configured   user themes: {paths.user_themes_dir()}")
    table.add_column("Name", min_width=max(map(len, result.names()), default=0) + 2)
    table.add_column("Mode", min_width=5)
    table.add_column("Source", overflow="fold")
    table.add_column("Colours", no_wrap=True, min_width=19)
    for theme in result.themes:
        colours = {**theme.to_color_system().generate(), **theme.variables}
        source = result.user_files.get(theme.name)
        swatches = _swatches(colours, PALETTE)
        swatches.append(" ")
        swatches.append_text(_swatches(colours, CHATAPP_VARIABLES))
        table.add_row(
            f"{theme.name} *" if theme.name == configured else theme.name,
            "dark" if theme.dark else "light",
            f"user: {source.name}" if source else "built-in",
            swatches,
        )
    SafeConsole().print(table)
    for failure in result.failures:
        typer.echo(f"warning: skipped {failure}", err=True)
    if configured not in result.names():
        typer.echo(f"warning: the configured theme {configured!r} is not among these", err=True)


def _swatches(colours: dict[str, str], names: tuple[str, ...]) -> Text:
    from textual.color import Color

    text = Text()
    for name in names:
        if name in colours:
            text.append(" ", style=Style(bgcolor=Color.parse(colours[name]).rich_color))
    return text
