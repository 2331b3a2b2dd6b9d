"""The README and docs/ stay a guide that matches the app: the key table, the CLI reference and
the config keys are what docs/keys.py writes from the app itself; the README stays short and
names `make run` and `make test`; every relative link points at a file that exists."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
README = ROOT / "README.md"
README_LIMIT = 10 * 1024
FIX = "run `.venv/bin/python docs/keys.py` and commit the pages it rewrites"


def load_generator():
    spec = importlib.util.spec_from_file_location("docs_keys", DOCS / "keys.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def keys():
    return load_generator()


def pages() -> list[Path]:
    return [README, ROOT / "benchmarks" / "README.md", *sorted(DOCS.glob("*.md"))]


# --- generated parts -----------------------------------------------------------------------------

def test_generated_parts_are_what_docs_keys_writes(keys):
    stale = [str(path.relative_to(ROOT)) for path, text in keys.expected().items()
             if path.read_text(encoding="utf-8") != text]
    assert not stale, f"{', '.join(stale)} differ from the app's keys, options or settings: {FIX}"


def test_every_binding_is_in_the_key_table(keys):
    """Key and description of every binding the help screen lists, as a row of the table."""
    page = (DOCS / "chat-and-keys.md").read_text(encoding="utf-8")
    missing = [f"{title}: {key} ({action})"
               for title, bindings in keys.key_sections()
               for key, action, _ in keys.binding_rows(bindings)
               if f"| {keys.cell(key)} | {keys.cell(action)} |" not in page]
    assert not missing, f"not in docs/chat-and-keys.md: {'; '.join(missing)}; {FIX}"


def test_the_help_screens_keys_are_in_the_key_table(keys):
    """Where the app groups its keys for F1 itself, every one of those is in the table too (a
    screen added to the help but not to docs/keys.py shows up here)."""
    from chatapp.ui.keys import help_sections  # a rename fails here rather than skipping the check
    page = (DOCS / "chat-and-keys.md").read_text(encoding="utf-8")
    missing = [f"{title}: {key} ({action})" for title, bindings in help_sections()
               for key, action, _ in keys.binding_rows(bindings)
               if f"| {keys.cell(key)} | {keys.cell(action)} |" not in page]
    assert not missing, (f"F1 lists keys docs/chat-and-keys.md lacks: {'; '.join(missing)} ({FIX}; if that is "
                         "not enough, add the screen to key_sections in docs/keys.py)")


OPTION_ROW = re.compile(r"^[│|]?\s+(?:-[a-zA-Z],?\s+)?(--[a-z][a-z0-9-]*)", re.M)
"""An option's row in `--help` (rich's boxed table or click's plain list): its long name."""



KEY_IN_PROSE = re.compile(r"(?<![\w+])((?:Ctrl|Alt|Shift)\+(?:Enter|Esc|[A-Z0-9←→↑↓?])|F(?:1[0-2]|[1-9]))(?![\w+])")
"""A key as the guides name it: Ctrl+R, Alt+←, Shift+Enter, F10."""


def test_keys_the_guides_name_are_bound(keys):
    """The prose outside the generated table names keys too ("Ctrl+R regenerates"); each must
    still be bound somewhere, so a key moved in the app shows up here with the page to fix."""
    bound = {label for _, bindings in keys.key_sections() for key, _, _ in keys.binding_rows(bindings)
             for label in key.split(", ")}
    guides = [README, *(p for p in sorted(DOCS.glob("*.md")) if p.name != "design.md")]
    stale = sorted({f"{page.relative_to(ROOT)}: {key}" for page in guides
                    for key in KEY_IN_PROSE.findall(page.read_text(encoding="utf-8")) if key not in bound})
    assert not stale, f"keys named in the guides that the app no longer binds: {'; '.join(stale)}"

def test_every_option_that_help_prints_is_in_the_cli_reference(keys):
    """Checked against `--help` output itself, not only against what docs/keys.py reads."""
    from typer.testing import CliRunner

    from chatapp import cli

    keys.cli_command()  # registers the subcommands, as `chatapp` does
    reference = (DOCS / "cli.md").read_text(encoding="utf-8")
    sections = dict(re.findall(r"^### `(chatapp[^`]*)`\n(.*?)(?=^### |\Z)", reference, re.M | re.S))
    runner = CliRunner()
    missing = []
    for path, section in sections.items():
        result = runner.invoke(cli.app, [*path.split()[1:], "--help"], env={"COLUMNS": "200", "NO_COLOR": "1"},
                               terminal_width=200)
        assert result.exit_code == 0, f"{path} --help: {result.output}"
        options = set(OPTION_ROW.findall(result.output)) - {"--help"}
        missing += [f"{path} {option}" for option in sorted(options) if option not in section]
    assert "chatapp ask" in sections and "chatapp chat" in sections
    assert not missing, f"--help prints options docs/cli.md lacks: {', '.join(missing)}; {FIX}"


def test_every_config_key_is_in_the_config_page():
    from dataclasses import fields

    from chatapp.config import ENV_SETTINGS, Settings

    page = (DOCS / "config.md").read_text(encoding="utf-8")
    missing = [f.name for f in fields(Settings) if f"| `{f.name}` |" not in page]
    missing += [var for var in ENV_SETTINGS.values() if var not in page]
    assert not missing, f"not in docs/config.md: {', '.join(missing)}; {FIX}"


# --- the README ----------------------------------------------------------------------------------

def test_readme_is_short():
    size = len(README.read_bytes())
    assert size <= README_LIMIT, f"README.md is {size:,} bytes; keep it at most {README_LIMIT:,} (move detail to docs/)"


def test_readme_names_the_two_commands():
    text = README.read_text(encoding="utf-8")
    assert "make run" in text and "make test" in text


def test_readme_links_every_docs_page():
    text = README.read_text(encoding="utf-8")
    assert "docs/index.md" in text and "benchmarks/README.md" in text
    index = (DOCS / "index.md").read_text(encoding="utf-8")
    unlisted = [p.name for p in DOCS.glob("*.md") if p.name != "index.md" and f"({p.name})" not in index]
    assert not unlisted, f"docs/index.md does not link {', '.join(unlisted)}"


# --- links ---------------------------------------------------------------------------------------

LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^(```|~~~).*?^\1", re.M | re.S)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading."""
    text = re.sub(r"[`*_]|<[^>]+>", "", heading.strip()).lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    text = FENCE.sub("", path.read_text(encoding="utf-8"))
    return {slug(h) for h in re.findall(r"^#{1,6} (.+)$", text, re.M)}


def links(path: Path) -> list[str]:
    return LINK.findall(FENCE.sub("", path.read_text(encoding="utf-8")))


@pytest.mark.parametrize("page", pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_point_at_existing_files(page):
    broken = []
    for target in links(page):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto:
            continue
        file_part, _, anchor = target.partition("#")
        file = (page.parent / file_part).resolve() if file_part else page
        if not file.exists():
            broken.append(target)
        elif anchor and file.suffix == ".md" and anchor not in anchors(file):
            broken.append(f"{target} (no such heading)")
    assert not broken, f"{page.relative_to(ROOT)}: broken links: {', '.join(broken)}"
