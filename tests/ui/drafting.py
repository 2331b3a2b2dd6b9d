"""An engine that drafts on every step (`AlwaysDraft`), for the UI's drafting tests."""

from __future__ import annotations

from chatapp.config import Settings
from chatapp.engine.chat.engine import Engine
from chatapp.engine.local.llama import LlamaRuntime, LoadOptions
from chatapp.engine.local.backend import LocalBackend
from tests.engine.drafting.always_draft import AlwaysDraft
from tests.engine.local.speculative import known_exact


SETTINGS = Settings(n_ctx=1024, temperature=0.0, max_tokens=64, draft="ngram")


def drafting_engine(model_path) -> Engine:
    runtime = LlamaRuntime(model_path, LoadOptions(n_ctx=SETTINGS.n_ctx, n_threads=1, n_threads_batch=1,
                                                   flash_attn=True))
    known_exact(runtime)  # as an earlier turn leaves it: the first turn here drafts
    return Engine(LocalBackend(runtime, draft_policy=AlwaysDraft(k_max=8)), SETTINGS)
