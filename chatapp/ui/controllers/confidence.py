"""The app's side of the confidence view: F10 on and off, a token's alternatives next to it in the
transcript (Alt+P, or a click on the token), and a reply written without probabilities scored
after the fact.

The engine computes probabilities while a reply is written only when the view is on. A reply
from before it costs one prefill pass over its tokens to read back (`Engine.score_reply`, on a
thread worker holding the turn lock, as a turn does); the app says how many tokens that
prefilled, and in how long. Scored probabilities are kept with the open session (the sessions
controller's `keep_scores`), so the shading and the alternatives come back when it is opened again.
"""

from __future__ import annotations

from dataclasses import replace
from functools import partial
from typing import Protocol

from chatapp.engine.sampling import TokenProbs
from chatapp.errors import ChatappError
from chatapp.ui.host import ChatHost, SessionKeeper
from chatapp.ui.messages import ReplyScored
from chatapp.ui.shown import VIEW_CANDIDATES, shown_path

SCORING = "scoring reply"
"""The status while a reply is scored (a turn that starts meanwhile says its own)."""


class ConfidenceHost(ChatHost, Protocol):
    """What the confidence view needs of the app beyond ChatHost."""

    confidence: bool
    """The view is on: the transcript shades replies, the engine computes probabilities."""

    def show_alternatives(self, message_id: str) -> bool:
        """A token's alternatives next to it in reply `message_id` (its first token below 50%);
        False when that reply is not drawn shaded."""
        ...

    def show_probs(self, message_id: str, probs: tuple[TokenProbs, ...]) -> None:
        """Reply `message_id` has these probabilities now: the transcript shades it."""
        ...


class ConfidenceController:
    def __init__(self, app: ConfidenceHost, sessions: SessionKeeper) -> None:
        self.app = app
        self.sessions = sessions

    def toggle(self) -> None:
        """F10: the view on (every reply on screen that has probabilities shaded, the engine
        computing them for the replies to come) or off."""
        app = self.app
        on = app.confidence = not app.confidence
        app.engine.set_generation(logprobs=VIEW_CANDIDATES if on else 0)
        if not on:
            app.notify("confidence view off", timeout=3)
            return
        replies = [entry for entry in shown_path(app.engine)[0] if entry.message.role == "assistant"]
        shaded = sum(1 for entry in replies if entry.probs)
        line = "confidence view on: replies are shaded by probability from now on"
        if replies:
            line = f"confidence view on: {shaded} of {len(replies)} replies on screen shaded by probability"
        if shaded < len(replies):
            line += "; Alt+P scores the selected reply (one prefill pass over it)"
        app.notify(f"{line}; click a token, or Alt+P, for its alternatives", timeout=8)

    def token_probs(self) -> None:
        """Alt+P: the alternatives of a token of the selected reply (else the last) next to it; a
        reply written without probabilities is scored first."""
        target = self._reply("show its tokens' probabilities")
        if target is None:
            return
        if not self.app.confidence:
            self.toggle()
        if not self.app.engine.reply_probs(target):
            self.score(target, show=True)
        elif not self.app.show_alternatives(target):
            self.app.notify(f"reply {target}'s tokens do not spell its text as shown; score it again from the "
                            "palette (Score reply)", severity="warning", markup=False)

    def score(self, message_id: str | None = None, *, show: bool = False) -> None:
        """Read reply `message_id` (the selected one, else the last) back in one prefill pass, on a
        worker, for its probabilities."""
        target = message_id or self._reply("score")
        if target is None or self.app.busy("score a reply"):
            return
        self.app.status = f"{SCORING} {target}…"
        self.app.run_worker(partial(self._score, target, show), name="score reply", group="score", thread=True,
                            exit_on_error=False)

    def _reply(self, what: str) -> str | None:
        """The selected reply's id, else the last reply's; None (said) when there is none."""
        chosen = self.app.selection()
        if chosen is not None:
            if chosen.role == "assistant":
                return chosen.message_id
            self.app.notify(f"only a reply can {what}: select one (Alt+Up, or click it)", severity="warning")
            return None
        last = next((m.id for m in reversed(self.app.engine.messages) if m.role == "assistant" and m.id), None)
        if last is None:
            self.app.notify(f"no reply to {what} yet", severity="warning")
        return last

    def _score(self, message_id: str, show: bool) -> None:
        """On the worker: score the reply holding the turn lock, post it, keep it with the session."""
        app, live = self.app, self.sessions.live
        with app.gate.turn() as engine:
            if engine is None:
                return
            try:
                scored = engine.score_reply(message_id, VIEW_CANDIDATES)
            except ChatappError as exc:
                app.post_message(ReplyScored(message_id, None, exc.one_line()))
                return
            except Exception as exc:  # noqa: BLE001 - whatever llama.cpp raises, the app says it and goes on
                app.post_message(ReplyScored(message_id, None, f"{type(exc).__name__}: {exc}"))
                return
        app.post_message(ReplyScored(message_id, scored, show=show))
        if live is not None:
            self.sessions.keep_scores(live, message_id, scored.probs)

    def scored(self, message: ReplyScored) -> None:
        """Shade the scored reply, say what it cost, and show a token's alternatives if asked for."""
        app, scored = self.app, message.scored
        if app.status.startswith(SCORING):
            app.status = ""
        if scored is None:
            app.notify(message.error, title="Confidence", severity="error", timeout=8, markup=False)
            return
        app.show_probs(message.message_id, scored.probs)
        turn = app.branch.turn
        if turn is not None and turn.record.extra.get("message_id") == message.message_id:  # the Tokens panel's too
            app.branch = replace(app.branch, turn=replace(turn, record=replace(turn.record, probs=scored.probs)))
        app.notify(f"scored reply {message.message_id}: prefilled {scored.prefilled:,} tokens "
                   f"({len(scored.probs):,} of the reply; {scored.cached:,} were cached) in {scored.ms:,.0f} ms",
                   title="Confidence", timeout=8, markup=False)
        if message.show:
            app.show_alternatives(message.message_id)
