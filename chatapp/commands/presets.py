"""`chatapp presets`: the presets the config file and the presets folder hold (chatapp.presets)."""

from __future__ import annotations

from typing import Annotated

import typer
from rich import box
from rich.markup import escape
from rich.table import Table

from chatapp import paths
from chatapp.commands.terminal import SafeConsole
from chatapp.format import strict_json
from chatapp.presets import load_presets, presets_dir

app = typer.Typer(no_args_is_help=True, add_completion=False,
                  help="Named settings (system prompt, samplers, KV type, context...) for --preset.")


@app.command("list")
def list_presets(
    as_json: Annotated[bool, typer.Option("--json", metavar="", help="One JSON object: presets and problems.")] = False,
) -> None:
    """Show every preset, what it sets and the model it is the default of; a bad one is one line on stderr."""
    found = load_presets()
    if as_json:
        print(strict_json({"presets": [found.presets[name].to_json() for name in sorted(found.presets)],
                           "problems": [{"name": name, "problem": found.problems[name]}
                                        for name in sorted(found.problems)]},
                          ensure_ascii=False))
        return
    out = SafeConsole()
    if not found.presets:
        out.print(f"no presets: add [presets.NAME] tables to {escape(str(paths.config_file()))} or NAME.toml files "
                  f"to {escape(str(presets_dir()))}", highlight=False)
    else:
        table = Table(box=box.SIMPLE_HEAD, caption=f"presets folder: {presets_dir()}")
        table.add_column("Name")
        table.add_column("Default of")
        table.add_column("Settings", overflow="fold")
        for name in sorted(found.presets):
            preset = found.presets[name]
            shown = ", ".join(f"{key}={value!r}" for key, value in preset.values.items())
            table.add_row(escape(name), escape(preset.model or "-"), escape(shown))
        out.print(table)
    for name in sorted(found.problems):
        typer.echo(f"warning: skipped preset {name!r}: {found.problems[name]}", err=True)
