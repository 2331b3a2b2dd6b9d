"""Prompts and an Engine that drafts on every step, for the speculative decoding tests."""

from __future__ import annotations

from chatapp.config import Settings
from chatapp.engine.backend import GenerationSettings
from chatapp.engine.chat.engine import Engine
from chatapp.engine.local.exact_batches import batch_check
from chatapp.engine.local.llama import LlamaRuntime
from chatapp.engine.local.backend import LocalBackend
from tests.engine.drafting.always_draft import AlwaysDraft
from tests.engine.local.paragraph import PARAGRAPH


FUNCTION = ("def total(items):\n    result = 0\n    for item in items:\n        result += item.price * item.count\n"
            "    return result\n")


PROMPTS = {
    "copy": f"Repeat the following paragraph exactly, but change the word 'red' to 'green':\n\n{PARAGRAPH}",
    "code": f"{FUNCTION}\nRename the variable result to acc and show the whole function.",
    "names": ("Anna Karlsson met Bertil Lindqvist and Cecilia Oyelaran at the Vasa Museum in Stockholm. "
              "Summarise this in one sentence, keeping every name."),
    "chat": "Write a short poem about autumn leaves.",
    "question": "Why is the sky blue? Answer in two sentences.",
}


def known_exact(runtime: LlamaRuntime, draft_max: int = Settings().draft_max) -> None:
    """The exactness verdict that a first drafted turn leaves on disk (LocalDrafting checks after
    a turn that had none), so that the turns of a test draft from their first."""
    batch_check(runtime, draft_max + 1, runtime.threads[0])


def drafting_engine(runtime: LlamaRuntime, policy=None, max_tokens: int = 96) -> Engine:
    known_exact(runtime)
    backend = LocalBackend(runtime, draft_policy=policy or AlwaysDraft(k_max=8))
    engine = Engine(backend, Settings(n_ctx=runtime.n_ctx, system_prompt="", draft="ngram"))
    engine.generation = GenerationSettings(temperature=0.0, max_tokens=max_tokens)
    return engine
