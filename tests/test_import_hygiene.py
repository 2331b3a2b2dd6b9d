"""The engine is headless: importing any of it pulls in neither textual nor rich."""

import pkgutil
import subprocess
import sys

import pytest

import chatapp.engine

ENGINE_MODULES = sorted(
    m.name for m in pkgutil.walk_packages(chatapp.engine.__path__, prefix="chatapp.engine.")
)


def test_engine_modules_exist():
    assert {"chatapp.engine.local.llama", "chatapp.engine.chat.engine", "chatapp.engine.backend",
            "chatapp.engine.local.backend", "chatapp.engine.chat.conversation", "chatapp.engine.tokens",
            "chatapp.engine.retrieval.attachments"} <= set(ENGINE_MODULES)


def test_engine_imports_neither_textual_nor_rich():
    code = (
        "import importlib, sys\n"
        f"for name in {ENGINE_MODULES!r}:\n"
        "    importlib.import_module(name)\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('textual', 'rich'))\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_only_the_llama_package_imports_llama_cpp():
    from pathlib import Path

    root = Path(chatapp.__file__).parent
    importers = sorted(
        str(p.relative_to(root)) for p in root.rglob("*.py")
        if "import llama_cpp" in p.read_text() or "from llama_cpp" in p.read_text()
    )
    assert importers and all(path.startswith("engine/local/llama/") for path in importers), importers


def test_importing_the_cli_writes_nothing(tmp_path):
    root = tmp_path / "fresh"  # tmp_path itself holds isolated_env's HOME
    root.mkdir()
    env = {"HOME": str(root), "XDG_CONFIG_HOME": str(root / "c"), "XDG_DATA_HOME": str(root / "d"),
           "XDG_CACHE_HOME": str(root / "k"), "PATH": "/usr/bin:/bin"}
    code = "import chatapp.cli, chatapp.config, chatapp.paths, chatapp.engine.chat.engine"
    subprocess.run([sys.executable, "-c", code], env=env, check=True)
    assert list(root.iterdir()) == []


def contract_names() -> list[str]:
    """The contracts pyproject.toml declares."""
    import tomllib
    from pathlib import Path

    config = tomllib.loads((Path(__file__).parent.parent / "pyproject.toml").read_text())
    return [contract["name"] for contract in config["tool"]["importlinter"]["contracts"]]


def lint_imports(cwd) -> subprocess.CompletedProcess[str]:
    from pathlib import Path

    exe = Path(sys.executable).with_name("lint-imports")
    return subprocess.run([str(exe), "--no-cache"], capture_output=True, text=True, cwd=cwd)


def test_import_linter_contract_holds():
    from pathlib import Path

    names = contract_names()
    assert len(names) >= 12
    out = lint_imports(Path(__file__).parent.parent)
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"{len(names)} kept, 0 broken" in out.stdout
    assert all(f"{name} KEPT" in out.stdout for name in names)


CIRCLES = {
    "a TYPE_CHECKING import of the app by a controller": (
        "ui/controllers/inside.py", "if TYPE_CHECKING:\n",
        "if TYPE_CHECKING:\n    from chatapp.ui.app import ChatApp\n"),
    "a function-level import between two shared engine modules": (
        "engine/tokens.py", "\nclass Vocabulary",
        "\ndef _late():\n    from chatapp.engine import kv\n\n\nclass Vocabulary"),
    "a command importing the one that imports it": (
        "commands/opening.py", "\ndef settings_with",
        "\ndef _late():\n    from chatapp.commands import core\n\n\ndef settings_with"),
}


@pytest.mark.parametrize("circle", list(CIRCLES))
def test_a_circle_anywhere_breaks_a_contract(tmp_path, circle):
    """The contracts are run on a copy of chatapp with one circle added: it must be caught."""
    import shutil
    from pathlib import Path

    repo = Path(__file__).parent.parent
    shutil.copytree(repo / "chatapp", tmp_path / "chatapp", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(repo / "pyproject.toml", tmp_path)
    path, before, after = CIRCLES[circle]
    if circle.endswith("two shared engine modules"):  # kv must import tokens for the circle to close
        kv = tmp_path / "chatapp/engine/kv.py"
        kv.write_text(kv.read_text() + "\n\ndef _tokens():\n    from chatapp.engine import tokens\n")
    if circle.startswith("a command"):
        core = tmp_path / "chatapp/commands/core.py"
        assert "from chatapp.commands.opening import" in core.read_text()
    target = tmp_path / "chatapp" / path
    text = target.read_text()
    assert before in text
    target.write_text(text.replace(before, after, 1))
    out = lint_imports(tmp_path)
    assert out.returncode != 0 and "No import circle among siblings BROKEN" in out.stdout, out.stdout


UI_BREACHES = {
    "Controllers never import a widget": (
        "ui/controllers/branches.py", "\nBranchAction",
        "\nfrom chatapp.ui.widgets.kv_panel import KVPanel  # noqa\nBranchAction"),
    "Controllers side by side, over the turn helpers": (
        "ui/controllers/models.py", "\nclass ModelHost",
        "\nfrom chatapp.ui.controllers import sessions  # noqa\nclass ModelHost"),
    "Widgets know no screen, controller or App": (
        "ui/widgets/kv_panel.py", "\nclass KVPanel", "\nfrom chatapp.ui.screens import help  # noqa\nclass KVPanel"),
    "The UI's floors, top to bottom": (
        "ui/messages.py", "\nclass TurnStarted", "\nfrom chatapp.ui.widgets import paint  # noqa\nclass TurnStarted"),
    "Layers: cli, commands, ui, engine, then the bottom modules": (
        "paths.py", "", ""),
}


@pytest.mark.parametrize("breach", list(UI_BREACHES))
def test_each_ui_contract_catches_its_breach(tmp_path, breach):
    """Each UI contract is run on a copy of chatapp with one import it forbids added (or, for the
    exhaustive top layers, a new top-level module given no layer): it must break."""
    import shutil
    from pathlib import Path

    repo = Path(__file__).parent.parent
    shutil.copytree(repo / "chatapp", tmp_path / "chatapp", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(repo / "pyproject.toml", tmp_path)
    path, before, after = UI_BREACHES[breach]
    if before:
        target = tmp_path / "chatapp" / path
        text = target.read_text()
        assert before in text
        target.write_text(text.replace(before, after, 1))
    else:  # a module at the top of chatapp that no layer names
        (tmp_path / "chatapp" / "stray.py").write_text("from chatapp import paths  # noqa: F401\n")
    out = lint_imports(tmp_path)
    assert out.returncode != 0, out.stdout
    broken = [line for line in out.stdout.splitlines() if line.endswith("BROKEN")]
    assert f"{breach} BROKEN" in broken, out.stdout


def test_no_command_or_widget_reaches_into_a_runtime():
    """Commands and the UI go through the engine's faces (Engine, the inside views): none of them
    reads a runtime or a backend as an attribute, which no import contract would see."""
    import ast
    from pathlib import Path

    root = Path(chatapp.__file__).parent
    reached = sorted(
        f"{path.relative_to(root)}:{node.lineno} .{node.attr}"
        for folder in ("commands", "ui") for path in (root / folder).rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Attribute) and node.attr in ("runtime", "_runtime", "_backend", "_llm"))
    reached += sorted(
        f"cli.py:{node.lineno} .{node.attr}" for node in ast.walk(ast.parse((root / "cli.py").read_text()))
        if isinstance(node, ast.Attribute) and node.attr in ("runtime", "_runtime", "_backend", "_llm"))
    assert reached == []
