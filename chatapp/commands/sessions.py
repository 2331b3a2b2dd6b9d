"""`chatapp sessions`: list, show, search, remove, rename and export saved sessions."""

from __future__ import annotations

import re
import time
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer
from rich import box
from rich.markup import escape
from rich.table import Table

from chatapp.commands.terminal import SafeConsole
from chatapp.config import load_settings
from chatapp.format import human_bytes, one_line_text, strict_json, visible_text

if TYPE_CHECKING:
    from chatapp.engine.sessions import SessionManager

app = typer.Typer(no_args_is_help=True, add_completion=False,
                  help="Saved sessions: transcripts with their KV-cache states.")

NameArg = Annotated[str, typer.Argument(help="The session's name.")]
ROLE_STYLES = {"system": "magenta", "user": "cyan", "assistant": "green"}
FIRST_LINE = 100
"""The most characters of a message's first line `tree` shows, however wide the terminal."""
SHOWN_CHARS = 20_000
"""The most of one message `show` prints: a saved message can be megabytes (edited into the
database), which a terminal can't usefully show; `export` writes all of it."""


class ExportFormat(str, Enum):
    md = "md"
    json = "json"


def _manager():
    from chatapp.engine.sessions import SessionManager

    return SessionManager.open(load_settings(), create=False)


def _checked(name: str) -> str:
    from chatapp.engine.sessions import validate_name

    return validate_name(name)


def _saved(manager: "SessionManager", given: str) -> str:
    """The saved session a command names: its exact name, its number in `sessions list`, or a
    unique beginning of its name (chatapp.engine.sessions.names.find_name)."""
    from chatapp.engine.sessions.names import find_name

    return find_name(_checked(given), [s.name for s in manager.store.summaries()])


def _when(ts: float, short: bool = False) -> str:
    return time.strftime("%m-%d %H:%M" if short else "%Y-%m-%d %H:%M", time.localtime(ts))


@app.command("list")
def list_sessions(
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object: the sessions, newest first.")] = False,
) -> None:
    """Every saved session, newest first: its first question, model, turns, tokens in its cache,
    state size and when it was last used. Every chat in the TUI is one (unless incognito). The
    other sessions commands take a session's number here, or a unique beginning of its name."""
    manager = _manager()
    summaries = manager.store.summaries()
    if as_json:
        print(strict_json({"directory": str(manager.store.directory), "sessions": [
            {"name": s.name, "first_line": s.first_line, "model": s.model, "quant": s.quant, "turns": s.turns,
             "kv_tokens": s.kv_tokens, "state_bytes": manager.state_size(s.state_key), "created_at": s.created_at,
             "updated_at": s.updated_at} for s in summaries]}, ensure_ascii=False))
        return
    console = SafeConsole()
    if not summaries:
        console.print(f"No saved sessions yet ([dim]{escape(str(manager.store.directory))}[/dim]). "
                      "Every chat becomes one at its first turn, in the TUI and with chatapp ask (--incognito keeps "
                      "none); chatapp ask --session NAME PROMPT names it")
        return
    # A long name (up to 64 characters) folds within its share; the first question is cut to one
    # line, and below 100 columns the date leaves out its year and the columns share their padding
    # (with a cell's padding on each side, 80 columns cut "12-05 10:24" to "12-05 10:").
    short = console.width < 100
    table = Table(title="Sessions", title_justify="left", box=box.SIMPLE_HEAD,
                  caption=f"{manager.store.directory}", caption_justify="left",
                  collapse_padding=short, show_edge=not short, pad_edge=not short)
    table.add_column("#", justify="right", no_wrap=True)  # what a command may name it by (find_name)
    table.add_column("name", overflow="fold", min_width=8, max_width=max(16, console.width // 5))
    # below 100 columns the header says "question": "first question" was cut to "first quest…"
    table.add_column("question" if short else "first question", overflow="ellipsis", no_wrap=True, min_width=12,
                     max_width=max(12, console.width // 4 - 8))
    table.add_column("model", overflow="fold", min_width=12)
    for column in ("turns", "tokens", "state"):
        table.add_column(column, justify="right", no_wrap=True)
    table.add_column("last used", no_wrap=True, min_width=len(_when(0, short)))
    for number, s in enumerate(summaries, 1):
        size = manager.state_size(s.state_key)
        figures = [str(s.turns), f"{s.kv_tokens:,}", human_bytes(size) if size is not None else "[dim]none[/dim]"]
        table.add_row(str(number), escape(one_line_text(s.name)), escape(one_line_text(s.first_line)),
                      escape(one_line_text(f"{s.model} ({s.quant})")), *figures,
                      _when(s.updated_at, short))
    console.print(table)


@app.command("show")
def show(name: NameArg) -> None:
    """The transcript and each turn's performance figures (a long message is cut at 20,000
    characters; export has all of it)."""
    from chatapp.engine.sessions.export import journal_notices, session_data

    manager = _manager()
    name = _saved(manager, name)
    session = manager.store.get(name)
    data = session_data(manager.store, name, session)
    console = SafeConsole()
    err = SafeConsole(stderr=True, highlight=False)
    for notice in (*session.notices, *journal_notices(data)):  # rows that could not be read as saved
        err.print(f"[yellow]session {escape(name)}: {escape(notice)}[/]")
    model = data["model"]
    size = manager.state_size(session.state_key)
    console.print(f"[bold]{escape(one_line_text(data['name']))}[/bold] · {escape(one_line_text(model['name']))} "
                  f"({escape(one_line_text(model['quant']))}) · "
                  f"created {_when(data['created_at'])} · last used {_when(data['updated_at'])} · "
                  f"KV state {human_bytes(size) if size is not None else 'none'}")
    for message in data["messages"]:
        style = ROLE_STYLES.get(message["role"], "white")
        stopped = " [dim](stopped)[/dim]" if message["stopped"] else ""
        console.print(f"\n[bold {style}]{message['role']}[/]{stopped}")
        for image in message.get("images", ()):
            console.print(f"[dim]\\[image {escape(image['name'] or image['sha256'][:12])}][/dim]", highlight=False)
        content = message["content"]
        console.print(escape(content[:SHOWN_CHARS]), highlight=False)
        if len(content) > SHOWN_CHARS:
            console.print(f"[dim]… {len(content) - SHOWN_CHARS:,} more characters not shown (chatapp sessions "
                          f"export {escape(name)} has all of it)[/dim]")
    if hidden := data.get("messages_in_other_branches"):
        console.print(f"\n[dim]{hidden:,} more message{'s' if hidden != 1 else ''} in other branches: "
                      f"chatapp sessions tree {escape(name)}[/dim]")
    console.print()
    # Below 100 columns the headers take two lines and the columns one space between them, each
    # as wide as its longest word (a finish reason is up to 7): at 80 it was "prom… cach… pref…".
    short = console.width < 100
    table = Table(title="Turns", title_justify="left", box=box.SIMPLE_HEAD,
                  **({"padding": 0, "show_edge": False} if short else {}))
    for column in ("turn", "prompt", "cached", "prefilled", "restored", "prefill tok/s", "TTFT ms", "decode",
                   "decode tok/s", "finish"):
        widest = max(len("stopped") if column == "finish" else 0, *map(len, column.split()))
        table.add_column(column.replace(" ", "\n") if short else column, min_width=widest if short else None,
                         justify="left" if column == "finish" else "right")
    for e in data["journal"]:
        table.add_row(*(_fmt(e.get(k), spec) for k, spec in (
            ("turn", ""), ("prompt_tokens", ","), ("cached_tokens", ","), ("prefill_tokens", ","),
            ("restored_tokens", ","), ("prefill_tps", ",.0f"), ("ttft_ms", ",.0f"), ("decode_tokens", ","),
            ("decode_tps", ",.1f"), ("finish_reason", ""))))
    console.print(table)


def _fmt(value, spec: str) -> str:
    if value is None:
        return "–"
    if spec and isinstance(value, (int, float)) and not isinstance(value, bool):
        return format(value, spec)
    return escape(str(value))


@app.command("rm")
def remove(name: NameArg) -> None:
    """Delete a session: its transcript, its turn records and its KV state (if the state file
    can't be removed, the session is kept and the reason given)."""
    manager = _manager()
    name = _saved(manager, name)
    manager.delete(name)
    SafeConsole(stderr=True).print(f"removed session {escape(name)}")


@app.command("rename")
def rename(old: Annotated[str, typer.Argument(help="Current name.")],
           new: Annotated[str, typer.Argument(help="New name.")]) -> None:
    """Give a session a new name (its KV state stays valid)."""
    manager = _manager()
    old = _saved(manager, old)
    manager.rename(old, _checked(new))
    SafeConsole(stderr=True).print(f"renamed session {escape(old)} to {escape(new)}")


@app.command("export")
def export(
    name: NameArg,
    fmt: Annotated[ExportFormat, typer.Option("--format", "-f", help="md or json.")] = ExportFormat.md,
    output: Annotated[Optional[Path], typer.Option(
        "--output", "-o", help="Write to this file (readable by you alone) instead of stdout.")] = None,
    force: Annotated[bool, typer.Option("--force", help="Overwrite an existing --output file.")] = False,
    all_branches: Annotated[bool, typer.Option(
        "--all-branches", help="Every branch of the conversation (JSON: a flat tree, each message naming its "
                               "parent and children; Markdown: a section per branch, each message written "
                               "once), not only the active path.")] = False,
) -> None:
    """Print the transcript (the active path, or --all-branches) and the per-turn performance
    journal (prefill/decode tok/s, TTFT, cache reuse, quant, KV type, backend) as Markdown or JSON."""
    from chatapp.engine.sessions.export import journal_notices, session_data, to_markdown, write_export

    manager = _manager()
    store, name = manager.store, _saved(manager, name)
    session = store.get(name)
    err = SafeConsole(stderr=True, highlight=False)
    data = session_data(store, name, session, all_branches=all_branches)
    for notice in (*session.notices, *journal_notices(data)):  # rows that could not be read as saved
        err.print(f"[yellow]session {escape(name)}: {escape(notice)}[/]")
    # Markdown is read as it is (cat, a pager), so its control characters are shown as escapes, in a
    # file as on stdout; JSON keeps every value exact, its controls written as JSON escapes
    text = (strict_json(data, ensure_ascii=False, indent=2) + "\n" if fmt is ExportFormat.json
            else visible_text(to_markdown(data)))
    if output is None:
        print(text, end="")
        return
    write_export(output, text, force=force)
    err.print(f"exported session {escape(name)} to {escape(str(output))}")


@app.command("tree")
def tree(name: NameArg,
         as_json: Annotated[bool, typer.Option("--json", help='[{"id", "parent", "role", "content", "active", '
                                                              '"children"}] instead of the drawing.')] = False) -> None:
    """The conversation as a tree: each message's id, role and first line; the active path marked
    with *. Use an id with `ask --branch-from ID` or `sessions checkout NAME ID`."""
    from chatapp.engine.sessions.export import tree_rows

    manager = _manager()
    name = _saved(manager, name)
    session = manager.store.get(name)
    rows = tree_rows(session)
    if as_json:
        keys = ("id", "parent", "role", "content", "active", "children")
        print(strict_json([{k: row[k] for k in keys} for row in rows], ensure_ascii=False, indent=2))
        return
    console = SafeConsole(highlight=False)
    console.print(f"[bold]{escape(name)}[/bold] · {len(rows)} message{'s' if len(rows) != 1 else ''}, "
                  f"{sum(1 for row in rows if not row['children'])} branch leaves · * the active path")
    if session.system_prompt:
        console.print(f"[dim]system: {escape(_first_line(session.system_prompt))}[/dim]")
    for line in _drawing(rows, console.width):
        console.print(line, no_wrap=True, overflow="ellipsis", crop=True)


def _drawing(rows: list[dict], width: int) -> list[str]:
    """The tree's lines as the TUI's tree (chatapp.ui.screens.tree) lists it: a run of messages
    without a fork at one level, so a long chat stays as narrow as a short one; each branch of a
    fork under a `branch i/n` line, one level in. Each message's first line fits `width`."""
    by_id = {row["id"]: row for row in rows}
    firsts = [row["id"] for row in rows if row["parent"] is None]
    levels: dict[str, int] = {}
    lines = []
    for row in rows:  # depth first: a message's parent comes before it
        siblings = by_id[row["parent"]]["children"] if row["parent"] is not None else firsts
        level = (levels[row["parent"]] if row["parent"] is not None else 0) + (len(siblings) > 1)
        levels[row["id"]] = level
        mark = "[bold]*[/bold]" if row["active"] else " "
        if len(siblings) > 1:
            branch = f"branch {siblings.index(row['id']) + 1}/{len(siblings)}"
            lines.append(f"{mark} {'  ' * (level - 1)}[dim]{branch}[/dim]")
        style = ROLE_STYLES.get(row["role"], "white")
        fork = f" ({len(row['children'])} branches)" if len(row["children"]) > 1 else ""
        room = width - (2 + 2 * level + len(row["id"]) + 1 + 9 + 1) - len(fork)
        text = escape(_first_line(row["content"], min(max(room, 12), FIRST_LINE)))
        lines.append(f"{mark} {'  ' * level}[{style}]{row['id']}[/] {row['role']:<9} {text}"
                     + (f"[dim]{fork}[/dim]" if fork else ""))
    return lines


def _first_line(text: str, width: int = 60) -> str:
    line = one_line_text(text.strip().splitlines()[0] if text.strip() else "")
    return line if len(line) <= width else line[:width - 1] + "…"


@app.command("checkout")
def checkout(name: NameArg,
             message: Annotated[str, typer.Argument(help="The id (or a unique prefix of it) of the reply "
                                                         "the active path should end at.")]) -> None:
    """Make the path ending at a reply the session's active one: the TUI and the next `ask
    --session` continue from there."""
    from chatapp.engine.chat.tree import MessageTree
    from chatapp.errors import InputError

    manager = _manager()
    name = _saved(manager, name)
    session = manager.store.get(name)
    tree = MessageTree.from_messages(session.tree, session.leaf)
    message_id = tree.resolve(message)
    if tree[message_id].role == "user":  # the next ask would put two questions in a row: refused, as --branch-from
        replies = [m.id for m in tree.children(message_id)]
        options = [f"its reply {', '.join(replies)}"] if replies else []
        options += [f"the reply before it, {tree[message_id].parent}"] if tree[message_id].parent else []
        raise InputError(f"message {message_id} is a user message: the active path ends at a reply, as a branch "
                         f"starts after one" + (f" (check out {' or '.join(options)})" if options else ""))
    manager.store.set_leaf(name, message_id)
    SafeConsole(stderr=True, highlight=False).print(f"session {escape(name)}: active path now ends at {message_id}")


@app.command("search")
def search(
    query: Annotated[str, typer.Argument(help='Words to find (SQLite FTS5: "a phrase", prefix*, AND, OR, NOT).')],
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object: the hits, newest first.")] = False,
    limit: Annotated[int, typer.Option("--limit", "-n", min=1, help="The most hits shown.")] = 20,
) -> None:
    """Find words in every saved message of every branch (questions, replies, thoughts, tools'
    calls and results, attached files' names), newest first. Each hit says how to open its
    session on the hit's branch, with that branch's kept KV state."""
    from chatapp.engine.sessions.search import search as find

    manager = _manager()
    hits = find(manager.store, query, limit)
    if as_json:
        print(strict_json({"query": query, "hits": [
            {"session": h.session, "message_id": h.message_id, "role": h.role, "snippet": h.snippet,
             "matches": [text for text, matched in h.parts if matched], "created_at": h.created_at,
             "leaf": h.leaf, "on_active_path": h.active, "field": h.field} for h in hits]}, ensure_ascii=False))
        return
    console = SafeConsole(highlight=False)
    if not hits:
        console.print(f"No saved message matches {escape(one_line_text(query))}")
        return
    for h in hits:
        snippet = "".join(f"[bold yellow]{escape(_flat(text))}[/]" if matched else escape(_flat(text))
                          for text, matched in h.parts)
        style = ROLE_STYLES.get(h.role, "white")
        console.print(f"[bold]{escape(one_line_text(h.session))}[/bold] [{style}]{h.message_id}[/] {h.role} "
                      f"[dim]{_when(h.created_at)}{h.where}{'' if h.active else ' · another branch'}[/dim]")
        console.print(f"  {snippet.strip()}")
        console.print(f"  [dim]open: {_opening(h)}[/dim]")


def _opening(hit) -> str:
    """The commands that open a hit's session on its branch (sessions checkout restores that
    branch's kept state at the next open)."""
    name = escape(_shell_word(hit.session))
    if hit.active or hit.leaf is None:
        return f"chatapp --session {name}"
    return f"chatapp sessions checkout {name} {hit.leaf} && chatapp --session {name}"


def _flat(text: str) -> str:
    """A piece of a snippet on one line: each run of whitespace one space (kept at its ends, where
    the piece meets a match), every other control character escaped."""
    return one_line_text(re.sub(r"\s+", " ", text))


def _shell_word(text: str) -> str:
    import shlex

    return shlex.quote(one_line_text(text))
