"""`chatapp presets`: the presets the config file and the presets folder hold (chatapp.presets)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

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


@app.command("import")
def import_presets(
    file: Annotated[Path, typer.Argument(help="An LM Studio preset (*.preset.json) or a llama-server "
                                              "--models-preset INI file (a preset per [section]).",
                                         show_default=False)],
    name: Annotated[Optional[str], typer.Option(
        "--name", help="The preset's name (a file of one preset only).", show_default=False)] = None,
    replace: Annotated[bool, typer.Option("--replace", metavar="", help="Overwrite a preset of the same name.")]
    = False,
) -> None:
    """Write another tool's presets as chatapp's own, each a file in the presets folder; what chatapp has no
    setting for is named."""
    from chatapp.preset_import import import_file, write_presets

    found = import_file(file, name)  # every preset checked before any is written
    for preset, target in zip(found, write_presets(found, file, replace=replace)):
        typer.echo(f"imported preset {preset.name!r} to {target}: {', '.join(preset.table) or 'no settings'}")
        if preset.skipped:
            typer.echo(f"  not imported (chatapp has no such setting): {', '.join(preset.skipped)}", err=True)
