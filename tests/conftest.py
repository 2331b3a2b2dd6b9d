"""Suite-wide fixtures: the real default model, and an isolated environment for every test."""

from __future__ import annotations

import compileall
import os
import subprocess
import sys
from pathlib import Path

import platformdirs
import pytest


def pytest_sessionstart(session) -> None:
    """Compile chatapp's modules once, before any test starts a `chatapp` process. Where
    PYTHONDONTWRITEBYTECODE is set (as on this project's machines), Python reads bytecode but never
    writes it, so each of the suite's ~800 `chatapp` processes compiled its 200 modules from
    source again: 0.3 s of each `chatapp ask` under load (benchmarks/README.md, "The test suite")."""
    import chatapp

    compileall.compile_dir(Path(chatapp.__file__).parent, quiet=1)


LLAMA_TOOLS_TESTS = ("tests/remote/", "tests/engine/inside/test_next_token.py")
"""Where the tests that run llama.cpp's own programs (chatapp.llama_tools) are."""
_background_build: subprocess.Popen | None = None


def pytest_collection_finish(session) -> None:
    """On a machine that has not built llama.cpp's programs yet, start building them now, at the
    lowest CPU priority, when the run holds a test that needs them: the build (about 6 minutes of
    both cores here) then fills the CPU the suite leaves idle (it keeps 1.3 of 2 cores busy on
    average) instead of stopping the run at its first llama-server test. That test waits for it
    on the build's lock (chatapp.llama_tools.ensure_tools)."""
    global _background_build
    from chatapp import llama_tools

    if llama_tools.built() or not any(item.nodeid.startswith(LLAMA_TOOLS_TESTS) for item in session.items):
        return
    log = platformdirs.user_cache_path("chatapp") / "llama-tools-build.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "w") as out:
        _background_build = subprocess.Popen(["nice", "-n", "19", sys.executable, "-m", "chatapp.llama_tools"],
                                             stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                             start_new_session=True)


def pytest_sessionfinish(session) -> None:
    """A run that ended before it needed the background build stops it (the build cleans up)."""
    if _background_build is not None and _background_build.poll() is None:
        _background_build.terminate()
        try:
            _background_build.wait(timeout=30)
        except subprocess.TimeoutExpired:
            _background_build.kill()


@pytest.fixture(scope="session")
def default_model_path() -> Path:
    """The catalog's default model, found in the real model folders or pulled into them.

    Session-scoped and requested by the autouse fixture below, so it runs once, before any
    test has pointed the XDG folders at tmp_path.
    """
    from chatapp.engine.models.catalog import load_catalog
    from chatapp.engine.models.resolve import resolve_model

    return resolve_model(load_catalog().default)


@pytest.fixture(scope="session")
def gemma_path() -> Path:
    """The catalog's gemma-3-270m, pulled once into the real model folder (pip caches the wheels).

    Session-scoped, so it is set up before the function-scoped isolated_env of the test asking for it.
    """
    from chatapp.engine.models.catalog import load_catalog
    from chatapp.engine.models.pull import find_local, pull

    entry = load_catalog().get("gemma-3-270m")
    return find_local(entry) or pull(entry.name)


@pytest.fixture(scope="session")
def _measured_bandwidth(tmp_path_factory) -> Path:
    """This machine's memory bandwidth at each thread count a test may run on, measured once for
    the run (chatapp.engine.machine.bandwidth) and given to every test's own cache folder. Each
    test starts with an empty cache, so each engine's first reply measured it again and its next
    turn or close waited for the probe: 0.3 s here, 1-4 s under load, in most of the suite's tests.
    A test of the probe itself asks for an empty cache with the `unmeasured_machine` mark."""
    from chatapp.engine.machine import bandwidth

    folder = tmp_path_factory.mktemp("machine-cache")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("XDG_CACHE_HOME", str(folder))
        for threads in range(1, min(os.cpu_count() or 1, 8) + 1):
            bandwidth.memory_bandwidth(threads)
    return folder / "chatapp" / bandwidth.CACHE_FILE


@pytest.fixture(scope="session")
def _pip_cache_dir() -> str:
    return os.environ.get("PIP_CACHE_DIR") or platformdirs.user_cache_dir("pip")


LEAKING_VARIABLES = (
    "CHATAPP_SERVER", "CHATAPP_API_KEY",  # config.ENV_SETTINGS: a developer's own server and key
    "OLLAMA_MODELS", "HF_HOME", "HF_HUB_CACHE", "LLAMA_CACHE",  # where model discovery scans
    "HF_TOKEN", "HF_HUB_OFFLINE",  # how huggingface_hub reaches the hub
)
"""Variables chatapp (or a library it calls) reads that would point a test at the user's own
server, key or model folders; every test runs with them unset."""


@pytest.fixture(autouse=True)
def isolated_env(default_model_path, _pip_cache_dir, _measured_bandwidth, request, tmp_path,
                 monkeypatch) -> dict[str, str]:
    """Point HOME and the config, data and cache folders at tmp_path; CHATAPP_MODEL at the real
    default model; unset every variable in LEAKING_VARIABLES. The cache starts with this machine's
    measured bandwidth (`_measured_bandwidth`), unless the test is marked `unmeasured_machine`.

    pip keeps its real cache, so a test that pulls from PyPI downloads at most once. The
    llama.cpp programs (chatapp.llama_tools) and the models are found by session fixtures that
    run before this one, so they still come from the real folders.
    """
    home = tmp_path / "home"
    home.mkdir()
    env = {"CHATAPP_MODEL": str(default_model_path), "PIP_CACHE_DIR": _pip_cache_dir, "HOME": str(home)}
    for var, folder in (("XDG_CONFIG_HOME", "config"), ("XDG_DATA_HOME", "data"), ("XDG_CACHE_HOME", "cache")):
        env[var] = str(tmp_path / folder)
    for var, value in env.items():
        monkeypatch.setenv(var, value)
    for var in LEAKING_VARIABLES:
        monkeypatch.delenv(var, raising=False)
    if request.node.get_closest_marker("unmeasured_machine") is None:
        from chatapp.private import make_private_dir

        cache = make_private_dir(tmp_path / "cache" / "chatapp")  # 0700, as chatapp makes it: no notice
        (cache / _measured_bandwidth.name).write_bytes(_measured_bandwidth.read_bytes())
        (cache / _measured_bandwidth.name).chmod(0o600)
    return env


@pytest.fixture
def quiet_machine(monkeypatch) -> None:
    """Other programs' load read as none, in this process: an in-process backend's prefill while
    typing gives way while every core is busy (tests/engine/chat/test_typeahead.py checks that),
    so a test of what typing prefills would otherwise pass or fail with the machine's load."""
    from chatapp.engine.local.threads import OtherLoad

    monkeypatch.setattr(OtherLoad, "sample", lambda self: 0.0)


@pytest.fixture(scope="session")
def family_models(default_model_path, tmp_path_factory):
    """name -> a copy of the default model carrying that template, made on first use and shared by
    every test of the session that renders the vendored templates (tests/engine/chat and tests/remote)."""
    from tests.gguf_copy import copies_with_templates

    folder = tmp_path_factory.mktemp("template-families")
    made: dict[str, Path] = {}

    def model(template: Path) -> Path:
        if template.stem not in made:
            target = folder / f"{template.stem}.gguf"
            copies_with_templates(default_model_path, {target: template.read_text(encoding="utf-8")})
            made[template.stem] = target
        return made[template.stem]
    return model
