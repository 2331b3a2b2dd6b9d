"""`chatapp models list`: every model on this machine, by source, with what it would cost here."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from chatapp.commands.terminal import SafeConsole
from chatapp.engine.models.sources import SOURCE_TITLES, SOURCES
from chatapp.format import human_bytes, human_count, one_line_text, strict_json


def list_models(
    as_json: Annotated[bool, typer.Option("--json", help="A list of {name, source, path, quant, size_bytes, "
                                                         "n_params, fits, problem, base}; base says why a model is not "
                                                         "tuned for chat, null for a chat model.")] = False,
) -> None:
    """Every model found: chatapp's catalog and folders, the Hugging Face cache, Ollama and LM
    Studio (read only), with whether each fits in memory at the configured context."""
    from chatapp.config import load_settings
    from chatapp.engine.machine.model_fit import model_rows
    from chatapp.engine.models.catalog import load_catalog

    settings = load_settings()
    found, problems = model_rows(settings)
    for problem in problems:
        print(f"chatapp: note: {one_line_text(problem)}", file=sys.stderr)
    listed = [row.to_json() for row in found]
    if as_json:
        typer.echo(strict_json(listed))
        return
    default = load_catalog().default
    console = SafeConsole()
    console.print(f"[dim]fits: loads here at n_ctx {settings.n_ctx:,} with a {settings.kv_type} KV cache; "
                  f"* the default model; (base): a base model, not tuned for chat[/dim]")
    for source in SOURCES:
        group = [row for row in listed if row["source"] == source]
        if group:
            console.print(table_of(source, group, default))


def table_of(source: str, group: list[dict], default: str) -> Table:
    """One source's models; its folders under the table, since a path column folds to nothing
    in an 80-column terminal (--json has every path)."""
    folders = sorted({str(Path(row["path"]).parent).replace(str(Path.home()), "~", 1)
                      for row in group if row["path"]})
    table = Table(title=SOURCE_TITLES[source], title_justify="left", caption_justify="left",
                  caption=escape(one_line_text("in " + ", ".join(folders))) if folders else None)
    # A long name (hf:org/repo:quant) folds onto a second line at 80 columns, a piped stdout's
    # width, rather than squeeze the short columns to "…" or to nothing.
    table.add_column("name", overflow="fold")
    for column in ("quant", "size", "params"):
        table.add_column(column, no_wrap=True)
    table.add_column("fits", overflow="fold")
    for row in group:
        name = escape(one_line_text(row["name"])) + (" *" if row["name"] == default else "") \
            + (" (base)" if row["base"] else "")
        if row["source"] == "catalog" and row["path"] is None:
            fits = "[dim]not downloaded[/dim]"
        elif row["problem"]:
            fits = f"[red]unusable: {escape(one_line_text(row['problem']))}[/red]"
        else:
            fits = {None: "?", True: "yes", False: "[red]no[/red]"}[row["fits"]]
        table.add_row(name, escape(row["quant"] or "?"), human_bytes(row["size_bytes"]) if row["size_bytes"] else "?",
                      human_count(row["n_params"]) if row["n_params"] else "?", fits)
    return table
