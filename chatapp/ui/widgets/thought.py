"""A thinking model's thought, drawn apart from its answer: a dim block above the reply that
folds (chatapp.engine.thinking splits the two). While the thought streams it is open and its
title counts it ("Thinking… 42 tokens · 0.9 s · 47 tok/s"); when the answer starts it folds ("Thought · 42 tokens",
and why it ended where chatapp ended it: "· cut at the budget", "· cut by answer now"), and a
click or Enter on the title opens it again. A reply loaded from a session shows its thought
folded."""

from __future__ import annotations

from textual.widgets import Collapsible, Static

from chatapp.format import visible_text


CLOSED_BY = {"budget": "cut at the budget", "answer now": "cut by answer now",
             "end of turn": "closed for the model"}
"""A turn record's `thinking_closed_by` (chatapp.engine.thinking.Steering), in the title's words."""


def thought_title(tokens: int, streaming: bool, closed_by: str = "", ms: float = 0.0) -> str:
    """`ms`: how long the thought has been decoding (live: its seconds and speed follow the count)."""
    counted = f"{tokens} token{'' if tokens == 1 else 's'}" if tokens else ""
    if streaming:
        timed = f" · {ms / 1000:.1f} s · {tokens * 1000 / ms:.0f} tok/s" if tokens and ms > 0 else ""
        return f"Thinking… {counted}".rstrip() + timed
    return " · ".join(filter(None, ("Thought", counted, CLOSED_BY.get(closed_by, ""))))


class Thought(Collapsible):
    DEFAULT_CSS = """
    Thought { color: $text-muted; background: transparent; text-style: dim; margin: 0 0 0 0; padding-bottom: 0; }
    Thought > Contents { padding: 0 0 0 2; }
    """

    def __init__(self, text: str = "", tokens: int = 0, *, streaming: bool = False) -> None:
        self.text, self.tokens, self.streaming = text, tokens, streaming
        self.closed_by = ""
        self.body = Static(visible_text(text.strip("\n")), markup=False)
        super().__init__(self.body, title=thought_title(tokens, streaming), collapsed=not streaming,
                         classes="thought")

    def show(self, text: str, tokens: int, ms: float = 0.0) -> None:
        """The thought so far (while it streams), decoded in `ms`."""
        if text != self.text:
            self.text = text
            self.body.update(visible_text(text.strip("\n")))
        self.tokens = tokens
        self.title = thought_title(tokens, self.streaming, ms=ms)

    def finish(self, text: str | None = None, tokens: int | None = None, closed_by: str = "") -> None:
        """The answer started (or the turn ended): the thought is whole, and folds; `closed_by`:
        what ended it, when chatapp did (the record's `thinking_closed_by`)."""
        if text is not None and text != self.text:
            self.text = text
            self.body.update(visible_text(text.strip("\n")))
        if tokens:
            self.tokens = tokens
        if self.streaming:
            self.streaming = False
            self.collapsed = True
        self.closed_by = closed_by or self.closed_by
        self.title = thought_title(self.tokens, False, self.closed_by)
