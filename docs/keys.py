"""Write the parts of the docs that the app itself knows, so they cannot drift from it:

- the key table in docs/chat-and-keys.md, from the bindings of the app, the composer, the Tokens
  panel and the screens that the help screen (F1) lists;
- the command and option reference in docs/cli.md, from the CLI itself (what `--help` prints);
- the config keys in docs/config.md, from `chatapp.config.Settings` (names, defaults, docstrings).

Each part sits between `<!-- generated:NAME -->` and `<!-- end:NAME -->` in its page; the prose
around it is written by hand. After changing a key, an option or a setting, run

    .venv/bin/python docs/keys.py

tests/test_docs.py fails while a page differs from what this script would write.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import re
import sys
from collections.abc import Callable, Iterable
from pathlib import Path

DOCS = Path(__file__).resolve().parent
ROOT = DOCS.parent
if str(ROOT) not in sys.path:  # `python docs/keys.py` from a checkout
    sys.path.insert(0, str(ROOT))

# --- keys --------------------------------------------------------------------------------------

KEY_NAMES = {
    "question_mark": "?", "escape": "Esc", "enter": "Enter", "tab": "Tab", "delete": "Delete",
    "backspace": "Backspace", "space": "Space", "up": "↑", "down": "↓", "left": "←", "right": "→",
    "home": "Home", "end": "End", "pageup": "PageUp", "pagedown": "PageDown",
    "left_square_bracket": "[", "right_square_bracket": "]", "ctrl": "Ctrl", "shift": "Shift",
    "alt": "Alt", "meta": "Meta", "super": "Super", "comma": ",", "full_stop": ".", "slash": "/",
}


def key_sections() -> list[tuple[str, list]]:
    """The bindings, by where they work: the same groups as the help screen (F1), read through
    the classes that own them."""
    from chatapp.ui.app import ChatApp
    from chatapp.ui.screens.attention import AttentionScreen
    from chatapp.ui.screens.sessions import SessionsScreen
    from chatapp.ui.screens.tree import TreeScreen
    from chatapp.ui.widgets.composer import Composer
    from chatapp.ui.widgets.token_popup import TokenPopup
    from chatapp.ui.widgets.tokens_panel import TokensPanel

    return [("In the composer", list(Composer.BINDINGS)),
            ("Anywhere", list(ChatApp.BINDINGS)),
            ("On a reply token's alternatives (Alt+P, or click the token)", list(TokenPopup.BINDINGS)),
            ("In the Tokens panel (or click a token)", list(TokensPanel.BINDINGS)),
            ("In the attention view (F9)", list(AttentionScreen.BINDINGS)),
            ("In the sessions list (F6)", list(SessionsScreen.BINDINGS)),
            ("In the conversation tree (Alt+T)", list(TreeScreen.BINDINGS))]


def key_label(keys: str) -> str:
    """"ctrl+c,f1" -> "Ctrl+C, F1"; "alt+up" -> "Alt+↑"."""
    labels = []
    for key in keys.split(","):
        parts = []
        for part in key.strip().split("+"):
            if part in KEY_NAMES:
                parts.append(KEY_NAMES[part])
            elif len(part) == 1:
                parts.append(part.upper() if parts else part)  # Ctrl+R, but the key a stays a
            elif re.fullmatch(r"f\d+", part):
                parts.append(part.upper())
            else:
                parts.append(part.replace("_", " ").capitalize())
        labels.append("+".join(parts))
    return ", ".join(labels)


def binding_rows(bindings: Iterable) -> list[tuple[str, str, str]]:
    """(keys, action, what it does) for each binding, in the order the class lists them."""
    rows = []
    for binding in bindings:
        if isinstance(binding, tuple):  # Textual also takes (key, action[, description])
            key, action, *rest = binding
            description, tooltip = (rest[0] if rest else action), ""
        else:
            key, action = binding.key, binding.action
            description, tooltip = binding.description or action, binding.tooltip or ""
        rows.append((key_label(key), description, tooltip))
    return rows


def cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def keys_table() -> str:
    lines = []
    for title, bindings in key_sections():
        lines += [f"**{title}**", "", "| key | action | what it does |", "|---|---|---|"]
        lines += [f"| {cell(k)} | {cell(a)} | {cell(t)} |" for k, a, t in binding_rows(bindings)]
        lines.append("")
    return "\n".join(lines).rstrip("\n")


# --- the command line --------------------------------------------------------------------------

def cli_command():
    """The CLI as `chatapp` runs it, subcommands registered."""
    import typer

    from chatapp import cli

    register = getattr(cli, "_register_subcommands", None)
    if register is not None and not getattr(cli_command, "registered", False):
        register()
        cli_command.registered = True  # type: ignore[attr-defined]
    return typer.main.get_command(cli.app)


def command_rows(command, ctx) -> list[tuple[str, str]]:
    rows = []
    for param in command.params:
        if getattr(param, "hidden", False):
            continue
        record = param.get_help_record(ctx)
        if record:
            rows.append((record[0], record[1]))
    return rows


def cli_reference() -> str:
    root = cli_command()
    lines: list[str] = []

    def walk(command, ctx, path: str) -> None:
        subcommands = getattr(command, "commands", None)
        if path != "chatapp" or not subcommands:
            help_text = inspect.cleandoc(command.help or "").split("\n\n")[0] if command.help else ""
            lines.extend([f"### `{path}`", ""])
            if help_text:
                lines.extend([cell(help_text), ""])
            rows = command_rows(command, ctx)
            if rows:
                lines.extend(["| option or argument | what it does |", "|---|---|"])
                lines.extend(f"| `{cell(opts)}` | {cell(what)} |" for opts, what in rows)
                lines.append("")
        for name, sub in (subcommands or {}).items():
            if getattr(sub, "hidden", False):
                continue
            walk(sub, type(ctx)(sub, parent=ctx, info_name=name), f"{path} {name}")

    ctx = root.make_context("chatapp", [], resilient_parsing=True)
    lines.extend(["### `chatapp`", "", "| option | what it does |", "|---|---|"])
    lines.extend(f"| `{cell(opts)}` | {cell(what)} |" for opts, what in command_rows(root, ctx))
    lines.append("")
    walk(root, ctx, "chatapp")
    return "\n".join(lines).rstrip("\n")


# --- the config file ---------------------------------------------------------------------------

def setting_docs() -> dict[str, str]:
    """Each Settings field's docstring (the string after it in chatapp/config.py)."""
    import chatapp.config

    tree = ast.parse(Path(chatapp.config.__file__).read_text(encoding="utf-8"))
    docs: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == "Settings":
            body = node.body
            for stmt, after in zip(body, body[1:] + [None]):
                if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
                    if (isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant)
                            and isinstance(after.value.value, str)):
                        docs[stmt.target.id] = inspect.cleandoc(after.value.value)
    return docs


def config_table() -> str:
    from chatapp.config import Settings

    docs = setting_docs()
    lines = ["| key | default | what it does |", "|---|---|---|"]
    for field in dataclasses.fields(Settings):
        if field.default is not dataclasses.MISSING:
            default = field.default
        elif field.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
            default = field.default_factory()  # type: ignore[misc]
        else:
            default = ""
        shown = '""' if default == "" else (str(default).lower() if isinstance(default, bool) else
                                            f'"{default}"' if isinstance(default, str) else str(default))
        lines.append(f"| `{field.name}` | `{cell(shown)}` | {cell(docs.get(field.name, ''))} |")
    return "\n".join(lines)


# --- writing -----------------------------------------------------------------------------------

GENERATED: dict[str, tuple[str, Callable[[], str]]] = {
    "keys": ("chat-and-keys.md", keys_table),
    "cli": ("cli.md", cli_reference),
    "config": ("config.md", config_table),
}


def replace_block(text: str, name: str, body: str) -> str:
    start, end = f"<!-- generated:{name} -->", f"<!-- end:{name} -->"
    if start not in text or end not in text:
        raise SystemExit(f"docs: markers {start} ... {end} are missing")
    head, rest = text.split(start, 1)
    _, tail = rest.split(end, 1)
    return (f"{head}{start}\n<!-- written by docs/keys.py from the app itself; edit the app, then run "
            f"`.venv/bin/python docs/keys.py` -->\n\n{body}\n\n{end}{tail}")


def expected() -> dict[Path, str]:
    """Each generated page as this script would write it."""
    pages: dict[Path, str] = {}
    for name, (page, make) in GENERATED.items():
        path = DOCS / page
        text = pages.get(path) or path.read_text(encoding="utf-8")
        pages[path] = replace_block(text, name, make())
    return pages


def main() -> int:
    changed = 0
    for path, text in expected().items():
        if path.read_text(encoding="utf-8") != text:
            path.write_text(text, encoding="utf-8")
            print(f"rewrote {path.relative_to(ROOT)}")
            changed += 1
    if not changed:
        print("docs are up to date")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
