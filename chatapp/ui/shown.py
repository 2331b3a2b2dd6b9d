"""What the screen shows of the conversation, as plain data: the App holds one `ShownBranch`
and the panels bind to it (Textual's "attributes down, messages up").

Every action that changes the shown branch (a turn, a switch, a jump from the tree, a delete, a
new chat, a session opened, a model switched) ends by handing the App the engine's own
`BranchFigures` for the leaf now shown, so no panel can go on showing a branch left behind: the
KV, Tokens, Speed and Model panels all draw from the same value.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Literal

from chatapp.engine import kv
from chatapp.engine.chat.branch_states import BranchFigures
from chatapp.engine.chat.engine import Engine
from chatapp.engine.chat.prompt_view import written_once
from chatapp.engine.chat.tree import MessageTree
from chatapp.engine.events import Message as ChatMessage, PromptToken
from chatapp.engine.sampling import TokenProbs
from chatapp.engine.stats import TurnRecord

FORECAST_WINDOW = 5
"""Recent turns whose average size the KV forecast goes by."""
VIEW_CANDIDATES = 10
"""Candidates per reply token the confidence view shows: the engine computes as many while the
view is on, and a reply scored after the fact gets as many."""


@dataclass(frozen=True)
class ShownTurn:
    """The turn that wrote the shown leaf: its record and its prompt as the cache holds it."""

    record: TurnRecord
    view: tuple[PromptToken, ...]


@dataclass(frozen=True)
class ShownBranch:
    """The shown branch's cache: the engine's figures for it, the turn that made it (None after a
    switch, a delete or a resume: that turn's figures describe another cache), and what the last
    change cost."""

    figures: BranchFigures | None = None
    turn: ShownTurn | None = None
    note: str = ""
    """What the last switch of branch, or branching turn, cost the cache, in words."""
    restored: str = ""
    """Where the cache came from when no turn has run on it yet: "memory", "disk" or "session"."""
    growths: tuple[int, ...] = field(default=())
    """Cells each recent turn of this conversation added, for the forecast of turns that fit."""

    @property
    def cells(self) -> int:
        return self.figures.cells if self.figures is not None else 0

    @property
    def n_ctx(self) -> int:
        return self.figures.n_ctx if self.figures is not None else 0

    def after_turn(self, record: TurnRecord, view: list[PromptToken], figures: BranchFigures,
                   note: str = "") -> ShownBranch:
        """The branch a turn just wrote: its figures, its record, the forecast one turn longer."""
        grew = kv.turn_growth(record.kv_used, record.cached_tokens, written_once(view, record.cached_tokens))
        growths = (*self.growths, grew)[-FORECAST_WINDOW:]
        return ShownBranch(figures, ShownTurn(record, tuple(view)), note, "", growths)

    def moved(self, figures: BranchFigures, note: str = "", restored: str = "") -> ShownBranch:
        """The same conversation on another branch (a switch, a jump, a delete): the figures are
        the new leaf's and the last turn's record no longer describes the cache."""
        return replace(self, figures=figures, turn=None, note=note, restored=restored)


def fresh(figures: BranchFigures | None, restored: str = "", note: str = "") -> ShownBranch:
    """Another conversation (a new chat, a session opened, a model switched): nothing carried over."""
    return ShownBranch(figures, None, note, restored)


@dataclass(frozen=True)
class Shown:
    """A message of the active path as the transcript draws it: with its place among its siblings."""

    message: ChatMessage
    position: int = 1
    siblings: int = 1
    probs: tuple[TokenProbs, ...] = ()
    """A reply's tokens with their probabilities, where its turn computed them (confidence view)."""


@dataclass(frozen=True)
class Selection:
    """The message selected in the transcript: its place in the path drawn, its id, its role."""

    index: int
    message_id: str
    role: Literal["user", "assistant", "tool"]


def shown_path(engine: Engine) -> tuple[list[Shown], int]:
    """The active path as the transcript draws it, and how many of its first messages are outside
    the context window. A copy of the tree is read: call it where no turn changes it."""
    tree = engine.tree
    path = []
    for message in tree.path():
        family, index = tree.siblings(message.id)
        path.append(Shown(message, index + 1, len(family),
                          engine.reply_probs(message.id) if message.role == "assistant" else ()))
    n_system = len(engine.messages) - len(path)
    return path, max(engine.window_start - n_system, 0)


def index_in(path: list[Shown], message_id: str | None) -> int | None:
    """Where message `message_id` is drawn in `path` (to select it); None: not on it, or no id."""
    return next((i for i, shown in enumerate(path) if shown.message.id == message_id), None) if message_id else None


@dataclass(frozen=True)
class TreeSnapshot:
    """The tree as the screen lists it, read on a worker (chatapp.ui.controllers.branches.tree_snapshot)."""

    tree: MessageTree
    tokens: dict[str, int] = field(default_factory=dict)
    """Each leaf's path in tokens (its prompt without a generation prompt)."""
    kept: dict[str, str] = field(default_factory=dict)
    """The leaves whose KV state is kept: cache, memory or disk."""
