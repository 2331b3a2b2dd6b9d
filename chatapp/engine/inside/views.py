"""What the views inside the next token need from a backend: the in-process one offers them
(chatapp.engine.local.next_token.NextTokenViews), over its loaded model; a llama-server does not.
The engine hands them out (`Engine.next_token_views`); the UI knows only this protocol."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from chatapp.engine.inside.lens import Lens
from chatapp.engine.inside.sampler_chain import ChainReplay
from chatapp.engine.inside.surprise import QuantCost, Surprise


class NextTokenViews(Protocol):
    def surprise(self, ids: Sequence[int], ctx: int,
                 should_stop: Callable[[], bool] = ...) -> Surprise | None: ...

    def compare_to(self, spec: str, ids: Sequence[int], ctx: int,
                   should_stop: Callable[[], bool] = ...) -> QuantCost | None: ...

    def lens(self, ids: Sequence[int], position: int, token: int | None, k: int = ...) -> Lens: ...

    def replay_chain(self, prompt: Sequence[int], reply: Sequence[int], *, temperature: float, top_k: int,
                     top_p: float, min_p: float, seed: int, turn_drew: bool = ...,
                     should_stop: Callable[[], bool] = ...) -> ChainReplay | None: ...
