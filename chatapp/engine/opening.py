"""The one door to a backend: which one the settings ask for, built and wrapped in an `Engine`.

This is the only module that knows both backends (the in-process llama.cpp one and the
llama-server one); the conversation owner (`Engine`) takes whichever it is handed. Both
backend modules are imported only when asked for, so that a llama-server chat never loads
llama_cpp and a local one never loads the HTTP client. The TUI is handed `open_engine` for its
model switch (as harlequin is handed its adapter); it never imports this module.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from chatapp.config import Settings
from chatapp.engine.chat.engine import Engine
from chatapp.errors import InputError
from chatapp.format import display_url

if TYPE_CHECKING:  # loads llama_cpp: only when asked for
    from chatapp.engine.local.next_token import NextTokenViews

Progress = Callable[[str, int, int], None]
"""`progress(label, done, total)` while a model is pulled."""
Waiting = Callable[[float], None]
"""`waiting(elapsed_s)` while a llama-server is still loading its model."""


def open_engine(settings: Settings, model: str | None = None, progress: Progress | None = None,
                waiting: Waiting | None = None) -> Engine:
    """The in-process backend on a model spec (see `resolve_named`), named as its store names
    it, pulling the default if missing; or, when settings.server is set, the llama-server there
    (see `connect_engine`)."""
    if settings.server:
        if model:
            raise InputError(f"--model {model} is a local model; the llama-server at "
                             f"{display_url(settings.server)} serves the model it was started with")
        return connect_engine(settings, waiting=waiting)
    from chatapp.engine.models.resolve import resolve_named

    from chatapp.engine.models.projector import projector_for

    path, name = resolve_named(model, settings, progress=progress)
    return load_engine(settings, path, name, projector=projector_for(model, path, settings.mmproj))


def connect_engine(settings: Settings, url: str | None = None, api_key: str | None = None,
                   waiting: Waiting | None = None) -> Engine:
    """The llama-server backend (settings.server and settings.api_key unless given)."""
    from chatapp.engine.server.backend import ServerBackend

    url = url or settings.server
    backend = ServerBackend.connect(url, settings.api_key if api_key is None else api_key, waiting)
    return Engine(backend, settings)


def load_engine(settings: Settings, path: Path, name: str | None = None, projector: Path | None = None) -> Engine:
    """The in-process backend on a model file already resolved and checked, shown as `name`
    (a store's name, see `resolve_named`; else the catalog name or the file name), reading
    images through `projector` (chatapp.engine.models.projector.projector_for). What can't
    fit in memory (or exceeds the training context without allow_long_ctx) is refused before
    llama.cpp allocates it."""
    from chatapp.engine.local.llama import gpu_offload_supported  # loads llama_cpp
    from chatapp.engine.local.backend import LocalBackend
    from chatapp.engine.machine.memory_check import check_load

    notices = check_load(settings, path, offloaded=settings.gpu_layers != 0 and gpu_offload_supported())
    from chatapp.engine.local.next_token import NextTokenViews

    backend = LocalBackend.load(path, settings, name, projector=projector)
    engine = Engine(backend, settings)
    engine.next_token_views = lambda: NextTokenViews(  # borrows the loaded model
        backend.runtime, open_other=lambda spec: open_next_token(settings, _local_path(spec, settings)))
    if backend.summary.base_model:  # said once, as the model loads: its replies continue text, not answer
        notices.append(f"{backend.summary.name} is {backend.summary.base_model}")
    engine.load_notices[:0] = notices
    return engine


def open_next_token(settings: Settings, path: Path, n_ctx: int = 256) -> NextTokenViews:
    """The views inside the next token (surprise, the logit lens, the sampler chain stage by
    stage) on a local model file, in a model loaded for them on the CPU; n_ctx: room to generate."""
    from chatapp.engine.local.next_token import NextTokenViews

    return NextTokenViews.load(path, settings, n_ctx)


def _local_path(spec: str, settings: Settings) -> Path:
    """The model file a spec names, never pulled: a second model to compare is one already here."""
    from chatapp.engine.models.resolve import resolve_named

    return resolve_named(spec, settings, pull_default=False)[0]


def local_versions() -> dict[str, str]:
    """The versions of llama-cpp-python and of the llama.cpp it vendors (loads llama_cpp)."""
    from chatapp.engine.local.llama import versions

    return versions()


def local_decode_device(settings: Settings) -> str:
    """Where in-process decode runs with these settings: "CPU" unless layers go to a GPU that
    this build of llama.cpp drives, then that backend's name (CUDA, Metal, ...)."""
    from chatapp.engine.local.llama import backend_name, gpu_offload_supported

    if settings.gpu_layers == 0 or not gpu_offload_supported():
        return "CPU"
    return backend_name()
