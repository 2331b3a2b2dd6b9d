"""Prompts and an Engine that drafts on every step, for the speculative decoding tests."""

from __future__ import annotations

from chatapp.config import Settings
from chatapp.engine.backend import GenerationSettings
from chatapp.engine.chat.engine import Engine
from chatapp.engine.local.exact_batches import BatchCheck, batch_check, remember, settings_key
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


_CHECKED: dict[tuple, BatchCheck] = {}
"""The checks this test run made, by model, context size and settings_key."""


def known_exact(runtime: LlamaRuntime, draft_max: int = Settings().draft_max) -> None:
    """The exactness verdict that a first drafted turn leaves on disk (LocalDrafting checks after
    a turn that had none), so that the turns of a test draft from their first. Checked once per
    model, context size and settings in a test run, then written into each test's own cache as
    `batch_check` writes it: a check decodes about a thousand tokens, and a dozen tests ask for the
    same one (tests/engine/local/test_exact_batches.py checks the check itself, from cold)."""
    threads = runtime.threads[0]
    key = (str(runtime.path), runtime.n_ctx, settings_key(runtime, threads), draft_max)
    if key in _CHECKED:
        remember(runtime, threads, _CHECKED[key])
        return
    check = batch_check(runtime, draft_max + 1, threads)
    if check is not None:
        _CHECKED[key] = check


def drafting_engine(runtime: LlamaRuntime, policy=None, max_tokens: int = 96) -> Engine:
    """Without `policy`, one that verifies up to 8 drafts on every step. The engine sets a policy's
    k_max from its draft_max setting, so that is 8 too: at a draft_max of 32, every step verified a
    33-token batch that kept a few (160 ms a step against 9 for a plain one)."""
    draft_max = AlwaysDraft().k_max if policy is None else Settings().draft_max
    known_exact(runtime, draft_max)
    backend = LocalBackend(runtime, draft_policy=policy or AlwaysDraft(k_max=draft_max))
    engine = Engine(backend, Settings(n_ctx=runtime.n_ctx, system_prompt="", draft="ngram", draft_max=draft_max))
    engine.generation = GenerationSettings(temperature=0.0, max_tokens=max_tokens)
    return engine
