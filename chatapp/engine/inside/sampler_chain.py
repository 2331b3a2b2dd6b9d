"""The sampler chain stage by stage: what each of llama.cpp's samplers left of the candidates.

chatapp's chain is llama.cpp's top_k, top_p, min_p (each keeping at least one token),
temperature, then a seeded draw (`dist`); at temperature 0, the greedy sampler alone. There is
no repetition penalty in it. A replay (chatapp.engine.local.next_token) decodes the turn's
prompt and reply again as the turn did, and at each reply position applies the same samplers,
one at a time, to all of the model's logits, keeping a snapshot after each; the `dist` sampler
is seeded as the turn's was and draws once per position, so the replay draws the turn's tokens
(`ChainReplay.matches`), and what every stage did to each draw can be shown.

For each stage: the candidates left, the share of the model's own probability (softmax of the
raw logits) they hold, and the distribution the chain would draw from if it stopped there
(softmax of the candidates' current logits: after `temperature`, the tempered one).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

SHOWN = 10
"""Candidates kept per stage for the view and the JSON."""


@dataclass(frozen=True)
class StageCandidate:
    id: int
    piece: str
    p_model: float
    """The model's own probability (softmax of the raw logits)."""
    p: float
    """Its probability in what is left after this stage."""

    def to_json(self) -> dict:
        return {"id": self.id, "piece": self.piece, "p_model": round(self.p_model, 6), "p": round(self.p, 6)}


@dataclass(frozen=True)
class Stage:
    name: str
    kept: int
    """Candidates left after the stage."""
    mass: float
    """Share of the model's own probability they hold."""
    top: tuple[StageCandidate, ...]

    def to_json(self) -> dict:
        return {"stage": self.name, "kept": self.kept, "mass": round(self.mass, 6),
                "top": [c.to_json() for c in self.top]}


@dataclass(frozen=True)
class ChainStep:
    """One reply token's pass through the chain."""

    index: int
    """Which reply token (0: the first)."""
    token: int
    piece: str
    turn_token: int | None
    """The token the turn drew here (None when only replayed)."""
    p_model: float
    p_final: float
    stages: tuple[Stage, ...]

    def to_json(self) -> dict:
        return {"index": self.index, "token": {"id": self.token, "piece": self.piece}, "turn_token": self.turn_token,
                "p_model": round(self.p_model, 6), "p_final": round(self.p_final, 6),
                "stages": [s.to_json() for s in self.stages]}


@dataclass(frozen=True)
class ChainReplay:
    settings: dict
    """temperature, top_k, top_p, min_p, seed: what the chain ran with."""
    steps: tuple[ChainStep, ...]
    seconds: float

    @property
    def matches(self) -> tuple[int, int]:
        """(equal, compared): at how many reply positions the replay drew the turn's token."""
        compared = [s for s in self.steps if s.turn_token is not None]
        return sum(1 for s in compared if s.token == s.turn_token), len(compared)

    def how(self) -> str:
        s = self.settings
        chain = "greedy (temperature 0)" if s["temperature"] <= 0 else \
            (f"top_k {s['top_k']}, top_p {s['top_p']}, min_p {s['min_p']}, temperature {s['temperature']}, "
             f"a draw seeded {s['seed']}")
        equal, compared = self.matches
        line = f"llama.cpp's samplers in its order, one at a time: {chain}; no repetition penalty"
        if compared:
            line += f". The replay drew the turn's token at {equal} of {compared} positions"
        elif s.get("turn_seed", 0) < 0:
            line += (f". The turn's seed was random (seed -1): the stages are the turn's, the draw shown is seed "
                     f"{s['seed']}'s")
        return line + "."

    def to_json(self) -> dict:
        equal, compared = self.matches
        return {"settings": self.settings, "penalties": None, "matches": {"equal": equal, "compared": compared},
                "seconds": round(self.seconds, 3), "steps": [s.to_json() for s in self.steps]}


def _softmax(logits: np.ndarray) -> np.ndarray:
    z = np.asarray(logits, dtype=np.float64)
    if not len(z):
        return z
    e = np.exp(z - z.max())
    return e / e.sum()


def step(index: int, logits: np.ndarray, token: int, turn_token: int | None,
         snapshots: list[tuple[str, np.ndarray]], piece: Callable[[int], str], shown: int = SHOWN) -> ChainStep:
    """A ChainStep from the raw logits and the stages' snapshots (fields "id", "logit", "p")."""
    model = _softmax(logits)
    stages = []
    for name, kept in snapshots:
        ids = kept["id"].astype(np.int64)
        p = _softmax(kept["logit"]) if name != "greedy" else model[ids]
        order = np.argsort(-p, kind="stable")[:shown]
        top = tuple(StageCandidate(int(ids[i]), piece(int(ids[i])), float(model[ids[i]]), float(p[i])) for i in order)
        stages.append(Stage(name, len(ids), float(model[ids].sum()), top))
    final = snapshots[-1][1]
    where = np.flatnonzero(final["id"] == token)
    if snapshots[-1][0] == "greedy":
        p_final = 1.0
    else:
        p_final = float(_softmax(final["logit"])[where[0]]) if len(where) else 0.0
    return ChainStep(index, token, piece(token), turn_token, float(model[token]), p_final, tuple(stages))
