"""Prefill and decode speed: this turn's figures live, then the record's, and a history.

With them: what drafting (speculative decoding) did, and decode's memory traffic against this
machine's measured bandwidth (the roofline), prefill's against compute."""

from __future__ import annotations

from collections import deque

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.reactive import reactive
from textual.widgets import Sparkline, Static

from chatapp.engine.chat.engine import ModelSummary
from chatapp.engine.chat.typeahead import TypeAhead
from chatapp.engine.events import PrefillDone, PrefillProgress
from chatapp.engine.machine.roofline import decode_line, prefill_line
from chatapp.engine.stats import DraftFigures, LiveDecode, TurnRecord, draft_figures, rate
from chatapp.format import count, ms, percent, tps
from chatapp.ui.shown import ShownBranch
from chatapp.ui.widgets.paint import Sketch

POSITIONS_SHOWN = 8
"""Draft positions whose acceptance the panel lists."""


def draft_lines(draft: DraftFigures) -> dict[str, str]:
    """The drafting figures as the panel words them, by name."""
    shown = {"drafts": f"drafts {count(draft.drafted)} tok, {count(draft.accepted)} accepted"
                       + (f" ({percent(draft.acceptance)})" if draft.drafted else "")}
    per_step = draft.tokens_per_step
    shown["draft_steps"] = (f"{per_step:.2f} tok per decode step (+{max(per_step - 1, 0):.2f} from drafts), "
                            f"{count(draft.steps)} steps")
    if draft.by_position:
        rates = " ".join(percent(a / d) if d else "–" for a, d in draft.by_position[:POSITIONS_SHOWN])
        shown["draft_positions"] = f"accepted by position: {rates}"
    if draft.speedup > 0:
        shown["draft_speedup"] = f"×{draft.speedup:.2f} against plain steps (estimated for this turn)"
    return shown


def roofline_text(bytes_per_token: int, decode_tps: float, bandwidth_gbps: float | None, backend: str,
                  note: str = "") -> str:
    """decode_line, one part a line."""
    return decode_line(bytes_per_token, decode_tps, bandwidth_gbps, backend, note).replace("; ", "\n  ")


def typing_line(state: TypeAhead, backend: str) -> str:
    """E.g. "ready: 412 of 415 tokens prefilled while typing", and what held it back if anything."""
    line = f"ready: {count(state.ready)} of {count(state.total)} tokens prefilled while typing"
    if backend == "llama-server":
        line += " (in llama-server's prompt cache: requests with n_predict 0)"
    if state.prefilled:
        line += f"\n  {count(state.prefilled)} computed while typing, the rest cached from earlier turns"
    return line + (f"\n  {state.note}" if state.note else "")


def phase_line(phase: str, tokens: int, elapsed_ms: float) -> str:
    """E.g. "thinking 40 tok · 310 ms · 129 tok/s": a part of a thinking model's decode."""
    return f"{phase} {count(tokens)} tok · {ms(elapsed_ms)} · {tps(rate(tokens, elapsed_ms))}"


def grammar_line(extra: dict, decode_tokens: int, decode_ms: float) -> str | None:
    """A turn under a reply shape: the grammar's time a token beside decode's, e.g. "grammar 1.30
    ms/tok beside decode's 9.8 ms/tok (41.6 ms in all)"; what a server cannot report, said; None
    without a grammar."""
    if said := extra.get("grammar_not_reported"):
        return f"grammar: {said}"
    per_token, total = extra.get("grammar_ms_per_token"), extra.get("grammar_ms")
    if not isinstance(per_token, (int, float)) or not isinstance(total, (int, float)):
        return None
    line = f"grammar {per_token:.2f} ms/tok"
    if decode_tokens:
        line += f" beside decode's {decode_ms / decode_tokens:,.1f} ms/tok"
    return line + f" ({ms(total)} in all)"


def image_line(extra: dict) -> str | None:
    """A turn about an image: its encode apart from prefill, e.g. "image: 16 tok, encoded in 6.7 ms
    (1 image)" or "image: 16 tok, kept in the cache (0 encodes)"; None without one."""
    images, tokens, encodes = extra.get("images"), extra.get("image_tokens"), extra.get("image_encodes")
    if not all(isinstance(v, int) for v in (images, tokens, encodes)) or not images:
        return None
    if not encodes:
        return f"image{'s' if images != 1 else ''}: {count(tokens)} tok, kept in the cache (0 encodes)"
    return (f"image{'s' if images != 1 else ''}: {count(tokens)} tok, {encodes} encoded in "
            f"{ms(float(extra.get('image_encode_ms') or 0.0))}, apart from prefill")


def threads_line(threads: int, reason: str) -> str:
    """E.g. "2 threads: fastest measured here (per token 1: 10.1 ms, 2: 6.3 ms)"."""
    line = f"{threads} thread{'s' if threads != 1 else ''}"
    return f"{line}: {reason}" if reason else line


HISTORY = 20
"""Turns the sparklines cover."""


class SpeedPanel(Vertical):
    DEFAULT_CSS = """
    SpeedPanel {
        height: auto;
        border: round $panel-lighten-2;
        border-title-color: $text-muted;
        padding: 0 1;
    }
    SpeedPanel #speed-figures { height: auto; }
    SpeedPanel .history-label { height: 1; color: $text-muted; margin-top: 1; }
    SpeedPanel .history-label.-decode { margin-top: 0; }
    SpeedPanel Sparkline { height: 1; }
    SpeedPanel #prefill-history > .sparkline--max-color { color: $token-prefill; }
    SpeedPanel #prefill-history > .sparkline--min-color { color: $token-prefill 40%; }
    SpeedPanel #decode-history > .sparkline--max-color { color: $token-generated; }
    SpeedPanel #decode-history > .sparkline--min-color { color: $token-generated 40%; }
    SpeedPanel.-no-history .history { display: none; }
    """

    branch: reactive[ShownBranch] = reactive(ShownBranch, init=False)
    """The shown branch: its turn's record is the one the panel reads out between turns."""
    prefill_progress: reactive[PrefillProgress | None] = reactive(None, init=False)
    """The running turn's prefill while it runs (chunk by chunk)."""
    prefill_done: reactive[PrefillDone | None] = reactive(None, init=False)
    """The running turn's prefill, from its end until the turn ends."""
    decode: reactive[LiveDecode | None] = reactive(None, init=False)
    thought_decode: reactive[LiveDecode | None] = reactive(None, init=False)
    """The running turn's decode as its thought last stood: live, decode splits into thinking
    (up to it) and answer (since)."""
    typing: reactive[TypeAhead | None] = reactive(None, init=False)
    """Prefill while typing, while the composer holds the next question (chatapp.engine.chat.typeahead)."""
    model: reactive[ModelSummary | None] = reactive(None, init=False)

    def __init__(self, *, name: str | None = None, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(name=name, id=id, classes=classes)
        self.border_title = "Speed"
        self.add_class("-no-history")
        self.history: deque[TurnRecord] = deque(maxlen=HISTORY)
        """This machine's recent turns, on any branch: the sparklines."""

    def compose(self) -> ComposeResult:
        # A Sketch, not a Static: live figures repaint several times a second, and a Sketch
        # asks for a new layout only when its height changes.
        yield Sketch(lambda _width: self._figures_text(), id="speed-figures")
        yield Static("", id="prefill-label", classes="history history-label")
        yield Sparkline([], id="prefill-history", classes="history")
        yield Static("", id="decode-label", classes="history history-label -decode")
        yield Sparkline([], id="decode-history", classes="history")

    def watch_branch(self, branch: ShownBranch) -> None:
        turn = branch.turn
        if turn is not None and (not self.history or self.history[-1] is not turn.record):
            self.history.append(turn.record)
            self._paint_history()
        self._paint()

    def watch_prefill_progress(self) -> None:
        self._paint()

    def watch_prefill_done(self) -> None:
        self._paint()

    def watch_decode(self) -> None:
        self._paint()

    def watch_thought_decode(self) -> None:
        self._paint()

    def watch_typing(self) -> None:
        self._paint()

    @property
    def backend(self) -> str:
        """Where decode runs (the model summary's backend): named when its bandwidth is not measured."""
        return self.model.backend if self.model is not None else "CPU"

    @property
    def last_record(self) -> TurnRecord | None:
        return self.branch.turn.record if self.branch.turn is not None else None

    @property
    def prefill(self) -> PrefillDone | None:
        return self.prefill_done

    @property
    def progress(self) -> PrefillProgress | None:
        return self.prefill_progress

    @property
    def live(self) -> LiveDecode | None:
        return self.decode

    # --- figures ------------------------------------------------------------------------
    @property
    def streaming(self) -> bool:
        return self.prefill is not None or self.progress is not None

    @property
    def figures(self) -> dict[str, str]:
        """What the panel shows, by name: the running turn's while it streams, else the last record's."""
        if self.prefill is not None:
            p, live = self.prefill, self.live
            shown = {"prefill_tokens": count(p.prefill_tokens), "cached_tokens": count(p.cached_tokens),
                     "prefill_ms": ms(p.prefill_ms), "prefill_tps": tps(p.prefill_tps)}
            if p.flops_per_token:
                shown |= {"prefill_compute": prefill_line(p.flops_per_token, p.prefill_tps)}
            if live is not None:
                shown |= {"decode_tokens": count(live.decode_tokens), "decode_ms": ms(live.decode_ms),
                          "decode_tps": tps(live.decode_tps)}
                if (thought := self.thought_decode) is not None:  # a thinking model's, so far
                    shown |= {"thinking": phase_line("thinking", thought.decode_tokens, thought.decode_ms)}
                    if live.decode_tokens > thought.decode_tokens:
                        shown |= {"answer": phase_line("answer", live.decode_tokens - thought.decode_tokens,
                                                       live.decode_ms - thought.decode_ms)}
                if live.threads:
                    shown |= {"threads": threads_line(live.threads, live.threads_reason)}
                if live.draft is not None:
                    shown |= draft_lines(live.draft)
                if live.bytes_per_token:
                    shown |= {"roofline": roofline_text(live.bytes_per_token, live.decode_tps, live.bandwidth_gbps,
                                                        self.backend, live.bandwidth_note)}
            return shown
        r = self.last_record
        if r is None:
            return {}
        shown = {"prefill_tokens": count(r.prefill_tokens), "cached_tokens": count(r.cached_tokens),
                 "prefill_ms": ms(r.prefill_ms), "prefill_tps": tps(r.prefill_tps), "ttft_ms": ms(r.ttft_ms),
                 "decode_tokens": count(r.decode_tokens), "decode_ms": ms(r.decode_ms),
                 "decode_tps": tps(r.decode_tps), "finish_reason": r.finish_reason}
        if r.thinking_tokens:  # a thinking model's decode, thought and answer apart
            shown |= {"thinking": phase_line("thinking", r.thinking_tokens, r.thinking_ms),
                      "answer": phase_line("answer", r.answer_tokens, r.answer_ms)}
        if (grammar := grammar_line(r.extra, r.decode_tokens, r.decode_ms)) is not None:
            shown |= {"grammar": grammar}
        if (image := image_line(r.extra)) is not None:
            shown |= {"image": image}
        if r.prefilled_while_typing:
            shown |= {"prefilled_while_typing": count(r.prefilled_while_typing)}
        if r.restored_tokens:  # the first turn after a session resume
            shown |= {"restored_tokens": count(r.restored_tokens), "restore_ms": ms(r.restore_ms)}
        if isinstance(r.extra.get("threads"), int):
            shown |= {"threads": threads_line(r.extra["threads"], str(r.extra.get("threads_reason", "")))}
        if isinstance(flops := r.extra.get("prefill_flops_per_token"), int) and flops:
            shown |= {"prefill_compute": prefill_line(flops, r.prefill_tps)}
        if (draft := draft_figures(r)) is not None:
            shown |= draft_lines(draft)
        elif why := r.extra.get("draft_off_because"):
            shown |= {"drafting": f"drafting off: {why}"}
        if chosen := r.extra.get("draft_config"):  # what was changed at load so that drafts stay exact
            shown |= {"draft_config": str(chosen)}
        if isinstance(per_token := r.extra.get("decode_bytes_per_token"), int) and per_token:
            bandwidth = r.extra.get("memory_bandwidth_gbps")
            shown |= {"roofline": roofline_text(per_token, r.decode_tps,
                                                bandwidth if isinstance(bandwidth, (int, float)) else None,
                                                self.backend, str(r.extra.get("memory_bandwidth_note") or ""))}
        return shown

    def _progress_text(self, p: PrefillProgress) -> Text:
        left = p.remaining_s
        lines = [f"prefill {count(p.done)} of {count(p.total)} tok (live)",
                 f"  {ms(p.elapsed_ms)} · {tps(p.tps)}" + (f" · ~{left:,.1f} s left" if left is not None else "")]
        if p.threads:
            lines.append(f"  {p.threads} thread{'s' if p.threads != 1 else ''}")
        return Text("\n".join(lines))

    def _figures_text(self) -> Text:
        if self.progress is not None and self.prefill is None:
            return self._progress_text(self.progress)
        text = self._record_text()
        if self.typing is not None and not self.streaming:
            return Text("\n").join([Text(typing_line(self.typing, self.backend)), text])
        return text

    def _record_text(self) -> Text:
        f = self.figures
        if not f:
            figures = self.branch.figures
            since = " on this branch since it was shown" if figures is not None and figures.tokens else " yet"
            return Text(f"no turn{since}", style="italic")
        typed = f" ({f['prefilled_while_typing']} while typing)" if "prefilled_while_typing" in f else ""
        lines = [f"prefill {f['prefill_tokens']} tok, {f['cached_tokens']} cached{typed}"]
        if f["prefill_tokens"] == "0" and "prefilled_while_typing" in f:
            lines.append("  all prefilled while typing")  # not "0.0 tok/s", which reads as a failure
        else:
            lines.append(f"  {f['prefill_ms']} · {f['prefill_tps']}")
        if "prefill_compute" in f:
            lines.append(f"  {f['prefill_compute']}")
        if "image" in f:
            lines.append(f"  {f['image']}")
        if "restored_tokens" in f:
            lines.insert(0, f"restored {f['restored_tokens']} tok from the session in {f['restore_ms']}")
        if "ttft_ms" in f:
            lines.append(f"first token {f['ttft_ms']}")
        if "decode_tokens" in f:
            lines += [f"decode {f['decode_tokens']} tok" + (" (live)" if self.streaming else ""),
                      f"  {f['decode_ms']} · {f['decode_tps']}"]
        elif self.streaming:
            lines.append("decode …")
        lines += [f"  {f[key]}" for key in ("thinking", "answer", "grammar") if key in f]
        if "threads" in f:
            lines.append(f"  {f['threads']}")
        if "roofline" in f:
            lines.append(f"  {f['roofline']}")
        if "drafting" in f:
            lines.append(f["drafting"])
        if "draft_config" in f:
            lines.append(f"  {f['draft_config']}")
        if "drafts" in f:
            lines.append(f["drafts"])
            lines += [f"  {f[key]}" for key in ("draft_steps", "draft_positions", "draft_speedup") if key in f]
        if "finish_reason" in f:
            lines.append(f"finished: {f['finish_reason']}")
        return Text("\n".join(lines))

    # --- painting -----------------------------------------------------------------------
    def _paint(self) -> None:
        if self.is_mounted:
            self.query_one("#speed-figures", Sketch).redraw()

    def _paint_history(self) -> None:
        if not self.is_mounted:
            return
        self.set_class(not self.history, "-no-history")
        self.border_subtitle = f"last {len(self.history)} turns" if len(self.history) > 1 else ""
        for phase in ("prefill", "decode"):
            # a turn that computed nothing in a phase (all cached, prefilled while typing) has no
            # speed there: plotted as 0 it drew "0–0" over a full bar
            ran = [r for r in self.history if getattr(r, f"{phase}_tokens") > 0]
            rates = [getattr(r, f"{phase}_tps") for r in ran]
            label = f"{phase} tok/s {min(rates):,.0f}–{max(rates):,.0f}" if rates else ""
            if skipped := len(self.history) - len(ran):
                label += f"{' · ' if label else f'{phase}: '}{skipped} turn{'s' * (skipped > 1)} computed none"
            self.query_one(f"#{phase}-label", Static).update(label)
            self.query_one(f"#{phase}-history", Sparkline).data = rates

    def on_mount(self) -> None:
        self._paint()
        self._paint_history()
