"""`chatapp config`: where the config file lives and what it holds."""

from __future__ import annotations

from dataclasses import fields

import typer

from chatapp import paths
from chatapp.config import Settings, from_table, read_table, to_toml, toml_value
from chatapp.errors import ConfigError

app = typer.Typer(no_args_is_help=True, add_completion=False)


@app.command("path")
def show_path() -> None:
    """Print the config file's path (it may not exist yet)."""
    typer.echo(paths.config_file())


@app.command("show")
def show() -> None:
    """Print the effective settings as TOML, marking each as from the file or a default."""
    path = paths.config_file()
    table = read_table(path)
    settings = Settings() if table is None else from_table(table, path)
    if table is None:
        typer.echo(f"# {path} does not exist: every value is a default.")
    else:
        typer.echo(f"# {path}")
    lines = [f"{f.name} = {toml_value(getattr(settings, f.name))}" for f in fields(Settings)]
    width = max(len(line) for line in lines)
    for line, f in zip(lines, fields(Settings)):
        source = "from file" if table is not None and f.name in table else "default"
        # Comments keep the output valid TOML, so it can seed a config file.
        typer.echo(f"{line:<{width}}  # {source}")


@app.command("init")
def init(
    force: bool = typer.Option(False, "--force", help="Overwrite an existing config file."),
) -> None:
    """Write the default settings to the config file."""
    path = paths.config_file()
    if path.exists() and not force:
        raise ConfigError(f"{path} already exists; use --force to overwrite it")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(to_toml(Settings()), encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot write {path}: {exc}") from None
    typer.echo(f"wrote {path}")
