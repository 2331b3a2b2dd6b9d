"""The engine facade the CLI and the TUI hold: one loaded model and one conversation."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from chatapp.config import Settings
from chatapp.engine import tokens as token_views
from chatapp.engine.chat import Chat, GenerationSettings
from chatapp.engine.events import Event
from chatapp.engine.quant import model_info


@dataclass(frozen=True)
class ModelSummary:
    name: str
    path: Path
    quant: str
    backend: str
    layers_offloaded: int
    n_layer: int
    n_ctx: int
    kv_type: str
    kv_bytes_per_token: int
    threads: int


def generation_settings(settings: Settings) -> GenerationSettings:
    return GenerationSettings(temperature=settings.temperature, top_k=settings.top_k, top_p=settings.top_p,
                              min_p=settings.min_p, max_tokens=settings.max_tokens, seed=settings.seed)


def display_name(path: Path) -> str:
    """The catalog name when the file is a catalog model, else the file name."""
    from chatapp.engine.catalog import load_catalog  # noqa: PLC0415

    entry = next((e for e in load_catalog().entries if e.file == path.name), None)
    return entry.name if entry else path.name


class Engine:
    def __init__(self, runtime, model_path: Path, settings: Settings):
        self.runtime = runtime
        self.model_path = Path(model_path)
        self.settings = settings
        self.chat = Chat(runtime, settings.system_prompt, generation_settings(settings))
        self.load_notices: list[str] = []
        """Warnings from loading (an n_ctx above the model's training context), one line each."""
        info = runtime.info
        self.summary = ModelSummary(
            name=display_name(self.model_path),
            path=self.model_path,
            quant=model_info(self.model_path).file_type,
            backend=info.backend,
            layers_offloaded=info.layers_offloaded,
            n_layer=info.n_layer,
            n_ctx=info.n_ctx,
            kv_type=info.kv_type,
            kv_bytes_per_token=runtime.kv_bytes_per_token,
            threads=info.n_threads,
        )

    @classmethod
    def open(cls, settings: Settings, model: str | None = None,
             progress: Callable[[str, int, int], None] | None = None) -> "Engine":
        from chatapp.engine.models import resolve_model  # noqa: PLC0415

        return cls.load(settings, resolve_model(model, settings, progress=progress))

    @classmethod
    def load(cls, settings: Settings, path: Path) -> "Engine":
        """Load a model file already resolved and checked (see `resolve_model`)."""
        from chatapp.engine.llama import LlamaRuntime, LoadOptions, gpu_offload_supported  # noqa: PLC0415
        from chatapp.engine.memory_check import check_load  # noqa: PLC0415

        # Refuse what can't fit (or exceeds the training context) before llama.cpp allocates it.
        notices = check_load(settings, path, offloaded=settings.gpu_layers != 0 and gpu_offload_supported())
        options = LoadOptions(n_ctx=settings.n_ctx, n_threads=settings.threads,
                              n_gpu_layers=settings.gpu_layers, kv_type=settings.kv_type)
        engine = cls(LlamaRuntime(path, options), path, settings)
        engine.load_notices = notices
        return engine

    def send(self, text: str) -> Iterator[Event]:
        return self.chat.send(text)

    def regenerate(self) -> Iterator[Event]:
        return self.chat.regenerate()

    def stop(self) -> None:
        self.chat.stop()

    def set_generation(self, **changes) -> None:
        from dataclasses import replace  # noqa: PLC0415

        self.chat.generation = replace(self.chat.generation, **changes)

    def tokenize(self, text: str) -> list[token_views.Token]:
        return token_views.tokenize_text(self.runtime, text)

    def close(self) -> None:
        self.runtime.close()
