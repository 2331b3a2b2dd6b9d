"""The suite's own layout: no test module imports another test module. What two test modules
share goes into a helper module (one not named test_*) or a conftest fixture, so moving or
renaming a test module never breaks another, and pytest never collects a module's tests twice."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).parent


def is_test_module(dotted: str) -> bool:
    return dotted.rsplit(".", 1)[-1].startswith("test_")


def imported_test_modules(source: str) -> list[str]:
    """The test modules `source` imports (absolutely or relatively, at any depth in the file)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names if is_test_module(alias.name)]
        elif isinstance(node, ast.ImportFrom):
            module = "." * node.level + (node.module or "")
            if node.module and is_test_module(node.module):
                found.append(module)
            else:  # from tests.ui import test_app; from . import test_app
                joint = "" if module.endswith(".") else "."
                found += [module + joint + alias.name for alias in node.names if is_test_module(alias.name)]
    return found


def test_the_check_finds_each_form_of_importing_a_test_module():
    source = ("import os\nfrom tests.ui._helpers import send\nfrom tests.ui.test_app import send\n"
              "import tests.cli.test_core_cli\nfrom . import test_snapshots\n"
              "def f():\n    from .test_panels import Host\n")
    assert sorted(imported_test_modules(source)) == [".test_panels", ".test_snapshots", "tests.cli.test_core_cli",
                                                   "tests.ui.test_app"]
    assert imported_test_modules("from tests.ui._helpers import send\nimport pytest\n") == []


def test_no_test_module_imports_another_test_module():
    offenders = {}
    for path in sorted(TESTS.rglob("test_*.py")):
        imported = imported_test_modules(path.read_text(encoding="utf-8"))
        if imported:
            offenders[str(path.relative_to(TESTS.parent))] = imported
    assert offenders == {}, "move what they share into a helper module or a conftest fixture"
