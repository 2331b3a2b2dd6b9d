"""The engine is headless: importing any of it pulls in neither textual nor rich."""

import pkgutil
import subprocess
import sys

import chatapp.engine

ENGINE_MODULES = sorted(
    m.name for m in pkgutil.walk_packages(chatapp.engine.__path__, prefix="chatapp.engine.")
)


def test_engine_modules_exist():
    assert {"chatapp.engine.local.llama", "chatapp.engine.chat.engine", "chatapp.engine.backend", "chatapp.engine.local.backend",
            "chatapp.engine.chat.conversation", "chatapp.engine.tokens",
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


def test_only_the_llama_module_imports_llama_cpp():
    from pathlib import Path

    root = Path(chatapp.__file__).parent
    importers = sorted(
        str(p.relative_to(root)) for p in root.rglob("*.py")
        if "import llama_cpp" in p.read_text() or "from llama_cpp" in p.read_text()
    )
    assert importers == ["engine/local/llama.py"]


def test_importing_the_cli_writes_nothing(tmp_path):
    env = {"HOME": str(tmp_path), "XDG_CONFIG_HOME": str(tmp_path / "c"), "XDG_DATA_HOME": str(tmp_path / "d"),
           "XDG_CACHE_HOME": str(tmp_path / "k"), "PATH": "/usr/bin:/bin"}
    code = "import chatapp.cli, chatapp.config, chatapp.paths, chatapp.engine.chat.engine"
    subprocess.run([sys.executable, "-c", code], env=env, check=True)
    assert list(tmp_path.iterdir()) == []


def test_import_linter_contract_holds():
    from pathlib import Path

    exe = Path(sys.executable).with_name("lint-imports")
    out = subprocess.run([str(exe)], capture_output=True, text=True, cwd=Path(__file__).parent.parent)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "3 kept, 0 broken" in out.stdout
