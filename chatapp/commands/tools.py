"""`chatapp tools`: the tools the model may call (chatapp's built-ins and each MCP server's),
what each costs in prompt tokens with the model, and the import of other apps' MCP servers."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich import box
from rich.markup import escape
from rich.table import Table

from chatapp.commands.ask_tools import open_registry
from chatapp.commands.core import ModelOpt, ServerOpt
from chatapp.commands.terminal import SafeConsole
from chatapp.errors import InputError
from chatapp.format import one_line_text, strict_json, text_start

app = typer.Typer(no_args_is_help=True, add_completion=False,
                  help="The tools the model may call: built-in and MCP servers'.")
MAX_IMPORT_BYTES = 1 << 20


@app.command("list")
def list_tools(
    model: ModelOpt = None,
    server: ServerOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help='{"tools": [{"name", "server", "enabled", '
                                                         '"description", "tokens"}], "glue_tokens", '
                                                         '"total_tokens", "format", "notices"}.')] = False,
    no_cost: Annotated[bool, typer.Option("--no-cost", help="Leave out the token costs (loads no model).")] = False,
) -> None:
    """Every tool with its server, whether it is enabled, and what its schema costs in prompt
    tokens: the prompt rendered through the model's chat template and tokenized with and without
    it (the glue the template adds once for any tools is shown apart)."""
    from chatapp.commands.opening import open_engine, settings_with

    with open_registry() as registry:
        tools = registry.all()
        costs = None
        if not no_cost:
            engine = open_engine(settings_with(server=server), model)
            try:
                costs = engine.tool_costs([t for t in tools if t.enabled])
                model_name = engine.summary.name
            finally:
                engine.close()
        rows = [{"name": t.name, "server": t.server, "enabled": t.enabled, "description": t.description,
                 "tokens": costs.per_tool.get(t.name) if costs else None} for t in tools]
        if as_json:
            print(strict_json({"tools": rows, "glue_tokens": costs.glue if costs else None,
                               "total_tokens": costs.total if costs else None,
                               "format": costs.format if costs else None,
                               "notices": registry.notices}, ensure_ascii=False))
            return
        how = "its template" if costs and costs.format == "template" else "chatapp (generic)"
        caption = (f"{model_name}: tools rendered by {how}; {costs.glue:,} tokens of glue, "
                   f"{costs.total:,} in all, in every prompt") if costs else ""
        table = Table(box=box.SIMPLE_HEAD, caption=escape(caption))
        for column, justify in (("Tool", "left"), ("Server", "left"), ("Enabled", "left"), ("Tokens", "right"),
                                ("Description", "left")):
            table.add_column(column, justify=justify, overflow="fold")
        for row in rows:
            tokens = "" if row["tokens"] is None else f"{row['tokens']:,}"
            table.add_row(escape(one_line_text(row["name"])), escape(one_line_text(row["server"])),
                          "yes" if row["enabled"] else "no", tokens, escape(text_start(row["description"], 120)))
        SafeConsole().print(table)
        for notice in registry.notices:
            typer.echo(f"chatapp: {one_line_text(notice)}", err=True)


@app.command("import")
def import_servers(
    file: Annotated[Path, typer.Argument(help="A JSON file with \"mcpServers\" (Claude Desktop's "
                                              "claude_desktop_config.json, Cursor's or LM Studio's mcp.json).")],
    replace: Annotated[bool, typer.Option("--replace", help="Overwrite servers of the same name.")] = False,
) -> None:
    """Add the MCP servers of another app's `mcpServers` JSON to chatapp's config as
    [mcp_servers.NAME] tables, the rest of the file kept as it was."""
    from chatapp.engine.tools.servers import add_servers, parse_mcp_json
    from chatapp.paths import read_capped

    try:
        text = read_capped(file, MAX_IMPORT_BYTES).decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read {file}: {getattr(exc, 'strerror', None) or exc}") from None
    servers = parse_mcp_json(text, str(file))
    if not servers:
        raise InputError(f"{file} lists no MCP servers")
    path = add_servers(servers, replace=replace)
    for server in servers:
        state = "" if server.enabled else " (disabled)"
        typer.echo(f"added [mcp_servers.{server.name}]{state}: {one_line_text(server.describe())}")
    typer.echo(f"to {path}")
