"""The app's side of looking inside the model: the Anatomy screen (F7), the neighbours of the
token selected in the Tokens panel, and the attention view (F9).

ChatApp holds one `InsideController` (`app.inside_ui`). Its neighbours lookup runs in the app's
thread workers (group "neighbours"), calls headless code (chatapp.engine.inside.neighbours) and only
posts a message; the first lookup on a model builds the embedding cache (about a second for
the default model), so it never runs on the UI thread.
"""

from __future__ import annotations

import threading
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from textual.message import Message
from textual.worker import get_current_worker

from chatapp.engine.inside.attention import AttentionMap, AttentionUnavailable
from chatapp.engine.inside.neighbours import EmbeddingIndex, Neighbour
from chatapp.engine.tokens import Token
from chatapp.errors import ChatappError
from chatapp.ui.screens.anatomy import AnatomyScreen
from chatapp.ui.screens.attention import AttentionScreen

if TYPE_CHECKING:
    from chatapp.ui.host import ChatHost

NEIGHBOURS_SHOWN = 10


class NeighboursFound(Message):
    def __init__(self, path: Path, token_id: int, neighbours: list[Neighbour] | None,
                 problem: str | None = None) -> None:
        super().__init__()
        self.path, self.token_id, self.neighbours, self.problem = path, token_id, neighbours, problem


class InsideController:
    """The Anatomy screen, the token neighbours and the attention view for one ChatApp."""

    def __init__(self, app: ChatHost) -> None:
        self.app = app
        self._index: EmbeddingIndex | None = None
        """The last model's embedding index, kept for the next lookup."""
        self._index_lock = threading.Lock()
        """Held while an index is opened, so quick selections wait for one build instead of starting several."""

    def toggle_anatomy(self) -> None:
        """F7 opens the Anatomy screen, and closes it (the binding has priority over the screen's own)."""
        app = self.app
        if isinstance(app.screen, AnatomyScreen):
            app.screen.dismiss(None)
            return
        summary = app.engine.summary
        app.push_screen(AnatomyScreen(summary.path, summary.kv_type))

    def toggle_attention(self, position: int | None = None) -> None:
        """F9 opens the attention view for the last turn, at the reply token at cache `position` if
        one is selected; F9 again closes it."""
        app = self.app
        if isinstance(app.screen, AttentionScreen):
            app.screen.dismiss(None)
            return
        if app.busy("look at attention"):
            return
        n_layer = app.engine.summary.n_layer or 1
        app.push_screen(AttentionScreen(self._capture_attention, position=position, layer=n_layer // 2))

    def _capture_attention(self, head_layer: int | None,
                           stop: threading.Event) -> tuple[AttentionMap | AttentionUnavailable, list[Token]]:
        """On the attention screen's worker: the engine's capture, under the turn lock (a turn
        waits for it, and closing the engine too)."""
        app = self.app
        with app.gate.turn() as engine:
            if engine is None:
                return AttentionUnavailable("chatapp is closing"), []
            found = engine.attention(head_layer, stop)
            tokens = engine.describe(found.tokens) if isinstance(found, AttentionMap) else []
        return found, tokens

    def token_selected(self, token_id: int) -> None:
        """The nearest tokens to `token_id` in the embeddings, looked up on a worker."""
        path = Path(self.app.engine.summary.path)
        self.app.neighbours = (token_id, None, None)
        self.app.run_worker(partial(self._find_neighbours, path, token_id), name="find neighbours",
                            group="neighbours", thread=True, exclusive=True, exit_on_error=False)

    def _embedding_index(self, path: Path) -> EmbeddingIndex:
        with self._index_lock:
            if self._index is None or self._index.path != path.resolve():
                self._index = None  # let the old model's matrix go before the new one is read
                self._index = EmbeddingIndex.open(path)
            return self._index

    def _find_neighbours(self, path: Path, token_id: int) -> None:
        """Runs on a thread worker."""
        app, worker = self.app, get_current_worker()
        try:
            index = self._embedding_index(path)
            if worker.is_cancelled:
                return
            with app.gate.tokenizing() as engine:  # closing the engine waits for this, as for the composer's tokens
                if engine is None:
                    return
                found = index.nearest(engine.describe, token_id, NEIGHBOURS_SHOWN)
        except (ChatappError, ValueError, OSError) as exc:
            app.post_message(NeighboursFound(path, token_id, None, f"no neighbours: {exc}"))
            return
        if not worker.is_cancelled:
            app.post_message(NeighboursFound(path, token_id, found))

    def found(self, message: NeighboursFound) -> None:
        if Path(self.app.engine.summary.path) != message.path:
            return  # looked up in a model that has since been replaced
        self.app.neighbours = (message.token_id, message.neighbours, message.problem)
