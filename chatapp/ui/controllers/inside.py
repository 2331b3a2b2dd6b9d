"""The app's side of looking inside the model: the Anatomy screen (F7), the neighbours of the
token selected in the Tokens panel, the attention view (F9), and the views inside the next token
(the palette's surprise, logit lens and sampler chain).

ChatApp holds one `InsideController` (`app.inside_ui`). Its neighbours lookup runs in the app's
thread workers (group "neighbours"), calls headless code (chatapp.engine.inside.neighbours) and only
posts a message; the first lookup on a model builds the embedding cache (about a second for
the default model), so it never runs on the UI thread.
"""

from __future__ import annotations

import threading
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from textual.message import Message
from textual.worker import get_current_worker

from chatapp.engine.inside.attention import AttentionMap, AttentionUnavailable
from chatapp.engine.inside.neighbours import EmbeddingIndex, Neighbour
from chatapp.engine.inside.surprise import MIN_CTX
from chatapp.engine.inside.views import NextTokenViews
from chatapp.engine.tokens import Token
from chatapp.errors import ChatappError
from chatapp.ui.screens.anatomy import AnatomyScreen
from chatapp.ui.screens.attention import AttentionScreen
from chatapp.ui.screens.next_token import Found, Kind, NextTokenScreen

if TYPE_CHECKING:
    from chatapp.engine.chat import Engine
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
        self._views: tuple[object, NextTokenViews] | None = None
        """The engine whose views inside the next token were opened last, and those views (they keep
        the output head, dequantized once per model)."""

    def open_view(self, view: str, position: int | None = None) -> None:
        """The palette's views inside the model at the reply token at cache `position`, if one is
        selected: "attention" (F9), "surprise", "lens" or "sampler"."""
        if view == "attention":
            self.toggle_attention(position)
        elif view in ("surprise", "lens", "sampler"):
            self.open_next_token(view, position)  # type: ignore[arg-type]

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

    def open_next_token(self, kind: Kind, position: int | None = None) -> None:
        """The conversation shaded by surprise, or the logit lens or sampler chain of the reply token
        at cache `position` (else the last reply token); again closes it."""
        app = self.app
        if isinstance(app.screen, NextTokenScreen):
            app.screen.dismiss(None)
            return
        if app.busy("look inside the next token"):
            return
        index = None
        turn = app.engine.last_turn()
        if kind != "surprise" and turn is not None:
            tokens, start = turn
            inside = position is not None and start <= position < len(tokens)
            index = position - start if inside else max(0, len(tokens) - start - 1)
        app.push_screen(NextTokenScreen(kind, partial(self._next_token, kind), index))

    def open_quant_cost(self, spec: str) -> None:
        """The conversation shaded by how far the model `spec` names (a second quant of the loaded
        one) is from it at each token, with both files' sizes and speeds."""
        app = self.app
        if isinstance(app.screen, NextTokenScreen) or app.busy("compare quants"):
            return
        app.push_screen(NextTokenScreen("quant", partial(self._quant_cost, spec), None))

    def _quant_cost(self, spec: str, _index: int | None, stop: threading.Event) -> Found:
        """On the screen's worker, under the turn lock: the second model is loaded, run over the
        cache's tokens beside the first, and closed."""
        with self.app.gate.turn() as engine:
            if engine is None:
                return "chatapp is closing"
            views = self._views_of(engine)
            if views is None:
                return "comparing quants needs the model in this process: a llama-server shows no logits of its own"
            tokens = engine.cached_tokens()
            if len(tokens) < 2:
                return "nothing in the cache yet: send a message first"
            return views.compare_to(spec, tokens, max(MIN_CTX, len(tokens)), stop.is_set) or "stopped"

    def _views_of(self, engine: Engine) -> NextTokenViews | None:
        if engine.next_token_views is None:
            return None
        if self._views is None or self._views[0] is not engine:
            self._views = (engine, engine.next_token_views())
        return self._views[1]

    def _next_token(self, kind: Kind, index: int | None, stop: threading.Event) -> Found:
        """On the screen's worker, under the turn lock (as the attention replay)."""
        with self.app.gate.turn() as engine:
            if engine is None:
                return "chatapp is closing"
            views = self._views_of(engine)
            if views is None:
                return ("these views need the model in this process: a llama-server shows neither its layers nor "
                        "its samplers")
            if kind == "surprise":
                tokens = engine.cached_tokens()
                if len(tokens) < 2:
                    return "nothing in the cache yet: send a message first"
                return views.surprise(tokens, max(MIN_CTX, len(tokens)), stop.is_set) or "stopped"
            turn = engine.last_turn()
            if turn is None or turn[1] >= len(turn[0]):
                return "no reply in the cache to look at: send a message first"
            tokens, start = turn
            if kind == "lens":
                position = start + min(index or 0, len(tokens) - start - 1)
                return views.lens(tokens, position - 1, tokens[position])
            g = engine.generation
            found = views.replay_chain(tokens[:start], tokens[start:], temperature=g.temperature, top_k=g.top_k,
                                       top_p=g.top_p, min_p=g.min_p, seed=max(g.seed, 0), turn_drew=g.seed >= 0,
                                       should_stop=stop.is_set)
            return "stopped" if found is None else replace(found, settings={**found.settings, "turn_seed": g.seed})

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
