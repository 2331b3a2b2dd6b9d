"""Every model found on this machine (chatapp.engine.models.discovery), with the figures a
choice needs: quantization and parameters from its header, and whether it fits in memory here
at the settings' context and KV type (memory_check's estimate). The CLI's `models list` and
the TUI's model picker show the same rows."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from chatapp.config import Settings
from chatapp.engine.machine.memory_check import fits
from chatapp.engine.models.base_model import base_model_reason, catalog_chat_flag
from chatapp.engine.models.discovery import discover
from chatapp.engine.models.quant import model_infos
from chatapp.engine.models.sources import Source


@dataclass(frozen=True)
class ModelRow:
    name: str
    source: Source
    path: str | None
    quant: str | None
    size_bytes: int
    n_params: int | None
    fits: bool | None
    """None when it cannot be told: not downloaded, or not a readable model."""
    problem: str | None
    base: str | None = None
    """Why it is a base model (chatapp.engine.models.base_model), None for a chat model."""

    def to_json(self) -> dict:
        return asdict(self)


def model_rows(settings: Settings) -> tuple[list[ModelRow], list[str]]:
    """One row per model found, and one line per store or model problem. Headers are read here,
    once per file version (chatapp.engine.models.quant caches them): run it off the UI thread."""
    found = discover()
    infos = model_infos([model.path for model in found.models if model.path is not None])
    rows, problems = [], list(found.problems)
    for model in found.models:
        quant, n_params, fit, problem = model.quant, None, None, model.problem
        if model.path is not None:
            info = infos.get(model.path, OSError("cannot be read"))
            if isinstance(info, Exception):
                problem = f"not a readable GGUF file ({info})"
            else:
                quant, n_params, fit = info.file_type or quant, info.n_params, fits(info, settings)
        if problem:
            problems.append(f"{model.name}: {problem}")
        chat = catalog_chat_flag(name=model.name) if model.source == "catalog" else None
        base = None if problem else base_model_reason(model.path, chat=chat)
        rows.append(ModelRow(model.name, model.source, str(model.path) if model.path else None, quant,
                             model.size_bytes, n_params, fit, problem, base))
    return rows, problems
