"""The confidence view's drawing: reply tokens shaded by their chosen probability, the legend of
the shades, and a token's alternatives as bars (the model's own probability and the sampler
chain's, side by side).

The shades are the engine's bands (chatapp.engine.sampling.BANDS), coloured from the theme: the
most likely band on the panels' own token background, the others blended from it towards the
theme's warning colour, and the least likely on its error colour, so unlikely tokens stand out.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.style import Style
from rich.text import Text
from textual.message import Message
from textual.widget import Widget

from chatapp.format import visible_text
from chatapp.engine.sampling import BANDS, TokenProbs, band, confidence
from chatapp.ui.widgets.paint import bg, blend, fg, legend, shown_piece, stacked_bar, swatch

_BLENDS = (("token-a", "warning", 0.0), ("token-a", "warning", 0.45), ("token-a", "warning", 0.9),
           ("token-a", "error", 1.0))
"""(from, to, share) per band of BANDS, most likely first."""
assert len(_BLENDS) == len(BANDS)


def band_styles(widget: Widget) -> list[Style]:
    return [blend(widget, low, high, share) for low, high, share in _BLENDS]


def legend_line(widget: Widget, width: int) -> Text:
    styles = band_styles(widget)
    return legend([Text.assemble(("  ", styles[i]), f" {label}") for i, (_, label) in enumerate(BANDS)], width)


def summary(probs: Sequence[TokenProbs]) -> str:
    """The reply's line: mean log-probability (perplexity) and the tokens below 10%."""
    found = confidence(probs)
    return found.describe() if found is not None else ""


def shaded_reply(widget: Widget, text: str, probs: Sequence[TokenProbs]) -> Text | None:
    """The reply as plain text, each token with probabilities on its band's shade and its index
    among them in the style's meta ("step", for a click on it); a start without them (a forced
    start) unshaded. None when the tokens do not spell the reply."""
    pieces = "".join(p.token for p in probs)
    if not probs or not text.endswith(pieces):
        return None
    styles = band_styles(widget)
    shaded = Text(visible_text(text[: len(text) - len(pieces)]))
    for index, step in enumerate(probs):
        shaded.append(visible_text(step.token), style=styles[band(step.p)] + Style(meta={"step": index}))
    return shaded


def first_unlikely(probs: Sequence[TokenProbs]) -> int:
    """The index of the first token below 50% (where a reply is worth looking at), else 0."""
    return next((i for i, step in enumerate(probs) if step.p < 0.5), 0)


CHOOSABLE = 9
"""Candidates the number keys choose from (1 to 9)."""


class AlternativeChosen(Message):
    """A candidate chosen for a reply token (its number key, or a click on it): a new reply beside
    reply `message_id` that takes `token` instead of its `step`-th token with probabilities."""

    def __init__(self, message_id: str, step: int, token: int) -> None:
        super().__init__()
        self.message_id, self.step, self.token = message_id, step, token


def alternatives(widget: Widget, step: TokenProbs, width: int) -> Text:
    """A reply token's candidates as two bars each: the model's own probability, then the
    chain's (what the token was drawn from); the chosen one marked."""
    raw_style, sampled_style = fg(widget, "token-generated"), fg(widget, "accent")
    empty = fg(widget, "kv-free")
    rank = "?" if step.rank is None else str(step.rank)
    after = "?" if step.rank_sampled is None else str(step.rank_sampled)
    entropy = "entropy not reported" if step.entropy is None else f"entropy {step.entropy:.2f} bits"
    head = Text.assemble(
        (f"{shown_piece(step.token)!r}", bg(widget, "token-a")),
        f" (id {step.id}) · p {step.p:.1%} rank {rank} · after the sampler "
        f"{'?' if step.p_sampled is None else f'{step.p_sampled:.1%}'} rank {after} · {entropy}")
    lines = [head, legend([swatch("model (temperature 1)", raw_style), swatch("after the sampler chain",
                                                                                sampled_style)], width)]
    label_width = min(14, max((len(shown_piece(c.token)) for c in step.top), default=1) + 2)
    bar_width = max(4, (width - label_width - 18) // 2)
    for number, c in enumerate(step.top, 1):
        chosen = c.id == step.id
        key = f"{number} " if number <= CHOOSABLE else "  "
        label = key + (("▶ " if chosen else "  ") + shown_piece(c.token))[:label_width].ljust(label_width)
        sampled = 0.0 if c.p_sampled is None else c.p_sampled
        line = Text(label, style=Style(bold=True) if chosen else "")
        line.append_text(stacked_bar([(c.p, raw_style)], 1.0, bar_width, empty))
        line.append(f" {c.p:6.1%} ")
        line.append_text(stacked_bar([(sampled, sampled_style)], 1.0, bar_width, empty))
        line.append(" n/a" if c.p_sampled is None else f" {sampled:6.1%}")
        if number <= CHOOSABLE:  # a click on the line chooses it, as its number key does
            line.stylize(Style(meta={"choose": number}))
        lines.append(line)
    if all(c.id != step.id for c in step.top):
        lines.append(Text(f"▶ {shown_piece(step.token)!r} is not among the top {len(step.top)}", style="italic"))
    if step.top:
        lines.append(Text(f"1–{min(CHOOSABLE, len(step.top))} or a click: a new reply from here with that token "
                          "(the old reply stays; nothing before it is prefilled again)", style="italic"))
    return Text("\n").join(lines)
