"""`chatapp config`: where the config file lives and what it holds."""

from __future__ import annotations

from dataclasses import fields

import typer

from chatapp import paths
from chatapp.config import ENV_SETTINGS, SECRET_SETTINGS, Settings, from_table, read_table, to_toml, toml_value, \
    with_environment
from chatapp.errors import ConfigError

app = typer.Typer(no_args_is_help=True, add_completion=False)


@app.command("path")
def show_path() -> None:
    """Print the config file's path (it may not exist yet)."""
    typer.echo(paths.config_file())


@app.command("show")
def show() -> None:
    """Print the effective settings as TOML, marking each as from the file, the environment or
    a default. An API key is never printed: its line says only that one is set."""
    path = paths.config_file()
    table = read_table(path)
    from_file = Settings() if table is None else from_table(table, path)
    settings = with_environment(from_file)
    if table is None:
        typer.echo(f"# {path} does not exist: every value is a default.")
    else:
        typer.echo(f"# {path}")
    lines, sources = [], []
    for f in fields(Settings):
        value = getattr(settings, f.name)
        # A masked key is commented out, so the output stays valid TOML that can seed a config file.
        hidden = f.name in SECRET_SETTINGS and value
        lines.append(f"# {f.name} = (set, hidden)" if hidden else f"{f.name} = {toml_value(value)}")
        if value != getattr(from_file, f.name):
            sources.append(f"from ${ENV_SETTINGS[f.name]}")
        else:
            sources.append("from file" if table is not None and f.name in table else "default")
    width = max(len(line) for line in lines)
    for line, source in zip(lines, sources):
        typer.echo(f"{line:<{width}}  # {source}")


@app.command("init")
def init(
    force: bool = typer.Option(False, "--force", help="Overwrite an existing config file."),
) -> None:
    """Write the default settings to the config file (readable by you alone)."""
    from chatapp.private import atomic_write
    from chatapp.private import make_private_dir

    path = paths.config_file()
    if path.exists() and not force:
        raise ConfigError(f"{path} already exists; use --force to overwrite it")
    try:
        make_private_dir(path.parent)
        atomic_write(path, [to_toml(Settings()).encode("utf-8")])  # 0600: it may come to hold an API key
    except OSError as exc:
        raise ConfigError(f"cannot write {path}: {exc}") from None
    typer.echo(f"wrote {path}")
