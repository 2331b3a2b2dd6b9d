"""Tokens: the composer's text as the tokenizer cuts it, or the last turn's prompt as the model saw it.

The panel draws what the App shows (the shown branch's last turn, the composer's tokens), bound
to the App's attributes. A token can be selected (←/→ while the panel has focus, or a click):
the panel posts TokenSelected, and the App sets the neighbours found in the embedding matrix.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.style import Style
from rich.text import Text
from textual import events
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.message import Message
from textual.reactive import reactive
from textual.widgets import Static

from chatapp.engine.events import PrefillDone, PromptToken
from chatapp.engine.sampling import TokenProbs, band
from chatapp.engine.stats import LiveDecode
from chatapp.engine.tokens import Token
from chatapp.format import count, visible_text
from chatapp.ui.shown import ShownBranch
from chatapp.ui.widgets.confidence import (
    CHOOSABLE, AlternativeChosen, alternatives, band_styles, legend_line, summary)
from chatapp.ui.widgets.paint import Sketch, bg, fg, legend, shown_piece, swatch

if TYPE_CHECKING:
    from chatapp.engine.inside.neighbours import Neighbour

    Neighbours = tuple[int, list[Neighbour] | None, str | None]

WINDOW = 1000
"""Tokens drawn at most; a longer text shows its last WINDOW tokens."""
ORIGINS = ("cached", "prefilled", "generated")
ORIGIN_COLOURS = {"cached": "token-cached", "prefilled": "token-prefill", "generated": "token-generated"}
TOOL_LEGEND = (("tools", "tool schemas"), ("call", "tool calls"), ("tool", "tool results"))
"""The tool roles (chatapp.engine.chat.prompt_view.TOOL_ROLES) as the legend names them, in the
KV panel's colours for them."""
_SUBSCRIPT = str.maketrans("0123456789", "₀₁₂₃₄₅₆₇₈₉")



def _plural(n: int, noun: str) -> str:
    return f"{count(n)} {noun}{'' if n == 1 else 's'}"

class TokensPanel(VerticalScroll):
    DEFAULT_CSS = """
    TokensPanel {
        height: 1fr;
        min-height: 5;
        border: round $panel-lighten-2;
        border-title-color: $text-muted;
        padding: 0 1;
        scrollbar-size-vertical: 1;
    }
    TokensPanel #tokens-summary { height: auto; margin-bottom: 1; }
    TokensPanel #tokens-pieces { height: auto; }
    TokensPanel #tokens-neighbours { height: auto; margin-top: 1; display: none; }
    TokensPanel.-selecting #tokens-neighbours { display: block; }
    TokensPanel #tokens-alternatives { height: auto; margin-top: 1; display: none; }
    TokensPanel.-alternatives #tokens-alternatives { display: block; }
    """

    BINDINGS = [
        Binding("left", "select(-1)", "Previous token", show=False,
                tooltip="Select the previous token and show its nearest tokens in the embedding matrix"),
        Binding("right", "select(1)", "Next token", show=False,
                tooltip="Select the next token and show its nearest tokens in the embedding matrix"),
        *(Binding(str(n), f"choose({n})", f"Alternative {n}", show=False,
                  tooltip="In the confidence view, on a selected reply token: a new reply that takes that "
                          "candidate there instead") for n in range(1, CHOOSABLE + 1)),
    ]

    class TokenSelected(Message):
        """The user picked a token; its neighbours are wanted."""

        def __init__(self, token: Token) -> None:
            super().__init__()
            self.token = token

    mode: reactive[str] = reactive("composer", always_update=True)
    """"composer" (the text being typed) or "turn" (the last turn's prompt)."""
    show_ids: reactive[bool] = reactive(False)
    """Show each token's id after its piece."""
    confidence: reactive[bool] = reactive(False)
    """The confidence view: reply tokens shaded by their probability, a selected one's alternatives."""
    branch: reactive[ShownBranch] = reactive(ShownBranch, init=False)
    """The shown branch (the App's): the turn that wrote it is the prompt drawn in "turn" mode."""
    composer_tokens: reactive[tuple[Token, ...]] = reactive((), init=False)
    """The composer's text as the tokenizer cuts it (the App's)."""
    neighbours: reactive[Neighbours | None] = reactive(None, init=False)
    """(token id, its neighbours or None while they are looked up, a problem): the App's, for the
    token this panel asked about; drawn while that token is the one selected."""
    live_reply: reactive[str | None] = reactive(None, init=False)
    """The running turn's reply as far as it has streamed (the App's); None between turns. While
    it runs, "turn" mode follows it instead of showing the turn before."""
    live_tokens: reactive[tuple[Token, ...]] = reactive((), init=False)
    """That reply's tokens as the cache holds them (the App's): drawn one by one while it runs,
    as the turn's own are after it; none (a backend that cannot say): its text is drawn."""
    prefill_done: reactive[PrefillDone | None] = reactive(None, init=False)
    """The running turn's prompt once prefilled (the App's): its cached and prefilled tokens."""
    decode: reactive[LiveDecode | None] = reactive(None, init=False)
    """The running turn's decode so far (the App's): its tokens generated."""

    def __init__(self, *, name: str | None = None, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(name=name, id=id, classes=classes)
        self.border_title = "Tokens"
        self.selected: int | None = None
        """Index of the selected token among the tokens shown, or None."""

    def compose(self) -> ComposeResult:
        yield Sketch(self._summary, id="tokens-summary")
        yield Static(id="tokens-pieces")
        yield Sketch(self._neighbours_text, id="tokens-neighbours")
        yield Sketch(self._alternatives_text, id="tokens-alternatives")

    def on_mount(self) -> None:
        self.app.theme_changed_signal.subscribe(self, lambda _theme: self._paint())
        self._paint()

    # --- the shown state, as the App hands it down ----------------------------------------
    @property
    def turn_view(self) -> tuple[PromptToken, ...]:
        return self.branch.turn.view if self.branch.turn is not None else ()

    @property
    def reuse_broken_at(self) -> int | None:
        return self.branch.turn.record.reuse_broken_at if self.branch.turn is not None else None

    @property
    def probs(self) -> tuple[TokenProbs, ...]:
        return self.branch.turn.record.probs if self.branch.turn is not None else ()

    @property
    def note(self) -> str:
        return self.branch.note

    def watch_branch(self) -> None:
        """Another branch, or a new turn on this one: its prompt, scrolled to the turn just made."""
        self._unselect()
        if self.branch.turn is not None or not self.composer_tokens:
            self.mode = "turn" if self.branch.turn is not None else "composer"
        else:
            self._paint()

    def on_show(self) -> None:
        """A tab opened (in a narrow terminal the panels share one): a scroll made while the panel
        was hidden had no size to go by, so the newest turn is brought into view now."""
        self.scroll_end(animate=False)

    def watch_composer_tokens(self, tokens: tuple[Token, ...]) -> None:
        """Typing switches back to the composer's view (an empty composer doesn't)."""
        self._unselect()
        if tokens or not self.turn_view:
            self.mode = "composer"
        elif self.mode == "composer":
            self._paint()

    def watch_live_reply(self, before: str | None, now: str | None) -> None:
        """A turn starts, streams or ends: the panel follows it, scrolled to its newest text,
        unless the composer's tokens are being looked at."""
        if now is not None and before is None:
            self._unselect()
            if not self.composer_tokens:
                self.mode = "turn"
                return
        if self.mode == "turn":
            self._paint()
            self.scroll_end(animate=False)

    def watch_neighbours(self) -> None:
        if self.is_mounted:
            self.query_one("#tokens-neighbours", Sketch).redraw()

    def toggle_ids(self) -> None:
        self.show_ids = not self.show_ids

    def toggle_mode(self) -> None:
        self._unselect()
        self.mode = "composer" if self.mode == "turn" else "turn"

    # --- selecting a token --------------------------------------------------------------
    @property
    def shown_tokens(self) -> list[Token]:
        """The tokens drawn now, oldest first (the last WINDOW of them)."""
        tokens = self.composer_tokens if self.mode == "composer" else [item.token for item in self.turn_view]
        return tokens[-WINDOW:]

    @property
    def selected_token(self) -> Token | None:
        tokens = self.shown_tokens
        return tokens[self.selected] if self.selected is not None and self.selected < len(tokens) else None

    def select(self, index: int) -> None:
        """Select the index-th token shown and ask for its neighbours."""
        tokens = self.shown_tokens
        if not tokens:
            return
        self.selected = max(0, min(index, len(tokens) - 1))
        token = tokens[self.selected]
        self.add_class("-selecting")
        self.set_class(self.confidence and self.selected_probs is not None, "-alternatives")
        self._paint()
        self.post_message(self.TokenSelected(token))

    def action_select(self, step: int) -> None:
        if self.selected is None:
            self.select(0 if step > 0 else len(self.shown_tokens) - 1)
        else:
            self.select(self.selected + step)

    def action_choose(self, number: int) -> None:
        step = self.selected_probs if self.confidence else None
        if step is None or number > len(step.top):
            return
        index = next(i for i, taken in enumerate(self.probs) if taken is step)
        reply = self.branch.turn.record.extra.get("message_id", "") if self.branch.turn is not None else ""
        self.post_message(AlternativeChosen(reply, index, step.top[number - 1].id))

    def on_focus(self) -> None:
        self.border_subtitle = "←/→ or click: a token's neighbours"

    def on_blur(self) -> None:
        self.border_subtitle = ""

    def on_click(self, event: events.Click) -> None:
        number = event.style.meta.get("choose")  # a candidate's line under the selected token
        if isinstance(number, int):
            self.action_choose(number)
            return
        index = event.style.meta.get("token")
        if isinstance(index, int):
            self.focus()
            self.select(index)

    def _unselect(self) -> None:
        self.selected = None
        self.remove_class("-selecting", "-alternatives")

    def _step_at(self) -> dict[int, TokenProbs]:
        """Index in the turn's view -> its probabilities: the last generated tokens are the sampled ones."""
        generated = [i for i, item in enumerate(self.turn_view) if item.origin == "generated"]
        return dict(zip(generated[len(generated) - len(self.probs):], self.probs)) if self.probs else {}

    def _mask_at(self) -> dict[int, tuple[int, float]]:
        """Index in the turn's view -> (entries the grammar allowed, probability it cut), for the
        reply tokens sampled under a grammar whose mask was counted (`/schema mask`): the record's
        grammar_allowed and grammar_cut, less the end-of-generation token's step (not in the cache)."""
        extra = self.branch.turn.record.extra if self.branch.turn is not None else {}
        allowed, cut = extra.get("grammar_allowed"), extra.get("grammar_cut")
        if not isinstance(allowed, list) or not isinstance(cut, list) or len(allowed) != len(cut):
            return {}
        if self.branch.turn is not None and self.branch.turn.record.finish_reason == "stop":
            allowed, cut = allowed[:-1], cut[:-1]
        generated = [i for i, item in enumerate(self.turn_view) if item.origin == "generated"]
        n = min(len(generated), len(allowed))
        return dict(zip(generated[len(generated) - n:], zip(allowed[len(allowed) - n:], cut[len(cut) - n:])))

    def _mask_lines(self) -> list[Text]:
        """The grammar's mask over the reply, and the selected reply token's, in words."""
        mask = self._mask_at()
        if not mask:
            return []
        allowed = sorted(a for a, _ in mask.values())
        forced = sum(1 for a in allowed if a == 1)
        mean_cut = sum(c for _, c in mask.values()) / len(mask)
        lines = [Text.assemble(("grammar mask: ", "dim"), f"{_plural(forced, 'token')} forced (", ("tinted", fg(
            self, "accent", underline=True)), f") of {count(len(mask))}; median {count(allowed[len(allowed) // 2])} "
            f"entries allowed; {mean_cut:.0%} of the probability cut on average")]
        at = self.selected + max(len(self.turn_view) - WINDOW, 0) if self.selected is not None else None
        if self.mode == "turn" and at in mask:
            n, c = mask[at]
            said = "forced: the only entry the grammar allowed" if n == 1 else f"the grammar allowed {count(n)} entries"
            lines.append(Text(f"{shown_piece(self.turn_view[at].token.piece)!r}: {said}, cutting {c:.1%} of the "
                              "probability", style=fg(self, "accent")))
        return lines

    def selected_reply_position(self) -> int | None:
        """The cache position of the selected token, when it is one the last turn generated."""
        if self.mode != "turn" or self.selected is None:
            return None
        position = self.selected + max(len(self.turn_view) - WINDOW, 0)
        if position < len(self.turn_view) and self.turn_view[position].origin == "generated":
            return position
        return None

    @property
    def selected_probs(self) -> TokenProbs | None:
        """The selected token's sampling step, when it is a reply token of the last turn that has one."""
        if self.mode != "turn" or self.selected is None:
            return None
        return self._step_at().get(self.selected + max(len(self.turn_view) - WINDOW, 0))

    def watch_confidence(self) -> None:
        self.set_class(self.confidence and self.selected_probs is not None, "-alternatives")
        self._paint()

    def validate_mode(self, mode: str) -> str:
        return mode if mode in ("composer", "turn") else "composer"

    def watch_mode(self) -> None:
        self._paint()
        if self.mode == "composer":
            self.scroll_end(animate=False)  # the cursor is usually at the end
        else:  # the turn just made is at the end of its prompt
            self.scroll_end(animate=False)

    def watch_show_ids(self) -> None:
        self._paint()

    # --- drawing ------------------------------------------------------------------------
    def _paint(self) -> None:
        if not self.is_mounted:
            return
        self.query_one("#tokens-summary", Sketch).redraw()
        pieces = self._composer_pieces() if self.mode == "composer" else \
            self._live_pieces() if self.live_reply is not None else self._turn_pieces()
        self.query_one("#tokens-pieces", Static).update(pieces)
        self.query_one("#tokens-neighbours", Sketch).redraw()
        self.query_one("#tokens-alternatives", Sketch).redraw()

    def _summary(self, width: int) -> Text:
        if self.mode == "composer":
            tokens = self.composer_tokens
            chars = sum(len(t.piece) for t in tokens)
            lines = [Text(f"composer · {_plural(len(tokens), 'token')} · {_plural(chars, 'char')}")]
        elif self.live_reply is not None:
            lines = self._live_summary(width)
        elif not self.turn_view:
            lines = [Text("no turn yet", style="italic")]
        else:
            lines = self._turn_summary(width)
        if self.note:
            lines.append(Text(f"⑂ {self.note}", style=fg(self, "accent")))
        shown = len(self.composer_tokens if self.mode == "composer" else self.turn_view)
        if shown > WINDOW:
            lines.append(Text(f"showing the last {count(WINDOW)}", style="italic"))
        return Text("\n").join(lines)

    def _composer_pieces(self) -> Text:
        tokens = self.composer_tokens
        start = max(len(tokens) - WINDOW, 0)
        plain = [bg(self, "token-a"), bg(self, "token-b")]
        special = [s + fg(self, "token-special", bold=True) for s in plain]
        pieces = Text()
        for i in range(start, len(tokens)):
            token = tokens[i]
            self._append(pieces, token, (special if token.special else plain)[i % 2], i - start)
        return pieces

    def _turn_summary(self, width: int) -> list[Text]:
        view, broken = self.turn_view, self.reuse_broken_at
        tally = dict.fromkeys(ORIGINS, 0)
        for item in view:
            tally[item.origin] += 1
        entries = [swatch(f"{name} {count(tally[name])}", fg(self, ORIGIN_COLOURS[name])) for name in ORIGINS]
        entries.append(swatch("special", fg(self, "token-special")))
        retrieved = sum(1 for item in view if item.role == "retrieved")
        if retrieved:  # attachment text: its own shade behind whichever origin colour it has
            entries.append(Text.assemble(("  ", bg(self, "token-retrieved-a")), f" retrieved {count(retrieved)}"))
        image = sum(1 for item in view if item.role == "image")
        if image:  # an image's cells (chatapp.engine.images): libmtmd's token count, in its own colour
            entries.append(swatch(f"image {count(image)}", fg(self, "kv-image")))
        thought = sum(1 for item in view if item.role == "thought")
        if thought:  # a thinking model's thoughts: their tokens drawn dim
            entries.append(Text(f"thought {count(thought)}", style=Style(dim=True, italic=True)))
        for role, said in TOOL_LEGEND:  # a tool loop's: the schemas, the calls, the results
            tokens = sum(1 for item in view if item.role == role)
            if tokens:
                entries.append(swatch(f"{said} {count(tokens)}", fg(self, f"kv-{role}")))
        drafted = sum(1 for item in view if item.drafted)
        if drafted:  # reply tokens that came from accepted drafts (speculative decoding): a tint of their own
            entries.append(Text.assemble(("  ", bg(self, "token-drafted-a")), f" from drafts {count(drafted)}"))
        lines = [Text(f"last turn · {_plural(len(view), 'token')} in the cache"), legend(entries, width)]
        if self.confidence:
            lines += [Text("confidence (the chosen token's probability):", style="dim"), legend_line(self, width),
                      Text(summary(self.probs) or "no probabilities for this turn: the next reply has them",
                           style="" if self.probs else "italic")]
        lines += self._mask_lines()
        if broken is not None and broken < len(view):
            lines.append(Text(f"▶ prefix reuse broke at token {count(broken)}: "
                              f"{shown_piece(view[broken].token.piece)!r}", style=fg(self, "warning")))
        figures, at = self.branch.figures, self.next_break
        if figures is not None and at is not None:
            lines.append(Text(f"▷ the next turn re-prefills {_plural(figures.reprefill, 'token')} from token "
                              f"{count(at)} ({shown_piece(view[at].token.piece)!r}): {figures.reprefill_reason}",
                              style=fg(self, "warning")))
        return lines

    def _live_summary(self, width: int) -> list[Text]:
        """The running turn's prompt and reply in figures: as the engine reports them while it runs."""
        done, decode = self.prefill_done, self.decode
        if done is None:
            return [Text("this turn · prefilling its prompt…", style="italic")]
        generated = decode.decode_tokens if decode is not None else 0
        entries = [swatch(f"cached {count(done.cached_tokens)}", fg(self, ORIGIN_COLOURS["cached"])),
                   swatch(f"prefilled {count(done.prefill_tokens)}", fg(self, ORIGIN_COLOURS["prefilled"])),
                   swatch(f"generated {count(generated)}", fg(self, ORIGIN_COLOURS["generated"]))]
        return [Text(f"this turn · {_plural(done.prompt_tokens + generated, 'token')} in the cache so far"),
                legend(entries, width),
                Text("the reply's tokens as they are decoded" if self.live_tokens else
                     "the reply as it streams; cut into its tokens when it ends", style="dim italic")]

    def _live_pieces(self) -> Text:
        """The reply so far: its tokens one by one, the newest WINDOW of them (as the turn's own are
        drawn once it ends), or one run of text where the backend cannot say its tokens yet."""
        if self.live_tokens:
            backgrounds = [bg(self, "token-a"), bg(self, "token-b")]
            generated, special = fg(self, ORIGIN_COLOURS["generated"]), fg(self, "token-special", bold=True)
            pieces, shown = Text(), self.live_tokens[-WINDOW:]
            for i, token in enumerate(shown):
                pieces.append(shown_piece(token.piece) or "∅",
                              style=backgrounds[i % 2] + (special if token.special else generated))
            return pieces
        text = self.live_reply or ""
        shown = visible_text(text[-20_000:]) if text else "…"  # control characters escaped, as everywhere
        return Text(shown, style=fg(self, ORIGIN_COLOURS["generated"]))

    @property
    def next_break(self) -> int | None:
        """Where in the last turn's tokens (the cache) the next turn's prompt will part from them
        because the template rewrites the history; None when it will not."""
        figures = self.branch.figures
        at = figures.reprefill_at if figures is not None and figures.reprefill else None
        return at if at is not None and at < len(self.turn_view) else None

    def _turn_pieces(self) -> Text:
        view, broken, coming = self.turn_view, self.reuse_broken_at, self.next_break
        origin = {name: fg(self, ORIGIN_COLOURS[name]) for name in ORIGINS}
        backgrounds = [bg(self, "token-a"), bg(self, "token-b")]
        retrieved = [bg(self, "token-retrieved-a"), bg(self, "token-retrieved-b")]
        drafted = [bg(self, "token-drafted-a"), bg(self, "token-drafted-b")]
        special = fg(self, "token-special", bold=True)
        steps = self._step_at() if self.confidence else {}
        forced = {i for i, (allowed, _) in self._mask_at().items() if allowed == 1}
        bands = band_styles(self)
        pieces = Text()
        for i in range(max(len(view) - WINDOW, 0), len(view)):
            item = view[i]
            shade = retrieved if item.role == "retrieved" else drafted if item.drafted else backgrounds
            style = shade[i % 2] + (special if item.token.special else origin[item.origin])
            if i in steps:  # the confidence view: the token's band instead of its origin's colours
                style = bands[band(steps[i].p)]
            if i in forced:  # the grammar allowed this token alone
                style += fg(self, "accent", underline=True)
            if item.role == "image":
                style += fg(self, "kv-image", bold=True)
            elif item.role == "template" and not item.token.special:
                style += Style(italic=True)
            elif item.role == "thought":
                style += Style(dim=True)
            if i == broken:
                pieces.append("▶", style=fg(self, "warning", bold=True, reverse=True))
                style += Style(underline=True)
            if i == coming:  # where the next turn's prompt parts from the cache
                pieces.append("▷", style=fg(self, "warning", bold=True, reverse=True))
            self._append(pieces, item.token, style, i - max(len(view) - WINDOW, 0))
        return pieces

    def _append(self, pieces: Text, token: Token, style: Style, shown_at: int) -> None:
        """One token's piece; `shown_at` (its index among the tokens shown) travels in the style's
        meta, so a click on it says which token it was."""
        if shown_at == self.selected:
            style += Style(reverse=True, bold=True)
        style += Style(meta={"token": shown_at})
        pieces.append(shown_piece(token.piece) or "∅", style=style)
        if self.show_ids:
            pieces.append(str(token.id).translate(_SUBSCRIPT), style=style + Style(dim=True))

    def _alternatives_text(self, width: int) -> Text:
        step = self.selected_probs if self.confidence else None
        return alternatives(self, step, width) if step is not None else Text("")

    def _neighbours_text(self, width: int) -> Text:
        token = self.selected_token
        if token is None or self.neighbours is None or self.neighbours[0] != token.id:
            return Text("")
        _, found, problem = self.neighbours
        title = Text(f"nearest to {shown_piece(token.piece)!r} (id {token.id}) in the embeddings, by cosine:",
                     style="dim")
        if problem:
            return Text.assemble(title, "\n", (problem, fg(self, "warning")))
        if found is None:
            return Text.assemble(title, "\n", ("looking… (the first time, the embeddings are read and cached)",
                                               "italic"))
        entries = [Text.assemble((shown_piece(n.piece) or "∅", bg(self, "token-a")),
                                 " n/a" if n.score is None else f" {n.score:.2f}")
                   for n in found]
        return Text.assemble(title, "\n", legend(entries, width))

