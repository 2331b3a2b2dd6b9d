"""Prefill and decode speed: this turn's figures live, then the record's, and a history."""

from __future__ import annotations

from collections import deque

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import Sparkline, Static

from chatapp.engine.events import PrefillDone, PrefillProgress
from chatapp.engine.stats import LiveDecode, TurnRecord
from chatapp.format import count, ms, tps
from chatapp.ui.widgets.paint import Sketch

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

    def __init__(self, *, name: str | None = None, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(name=name, id=id, classes=classes)
        self.border_title = "Speed"
        self.add_class("-no-history")
        self.last_record: TurnRecord | None = None
        self.prefill: PrefillDone | None = None
        """The running turn's prefill, from PrefillFinished until the turn ends."""
        self.progress: PrefillProgress | None = None
        """The running turn's prefill while it runs (chunk by chunk)."""
        self.live: LiveDecode | None = None
        self.history: deque[TurnRecord] = deque(maxlen=HISTORY)

    def compose(self) -> ComposeResult:
        # A Sketch, not a Static: live figures repaint several times a second, and a Sketch
        # asks for a new layout only when its height changes.
        yield Sketch(lambda _width: self._figures_text(), id="speed-figures")
        yield Static("", id="prefill-label", classes="history history-label")
        yield Sparkline([], id="prefill-history", classes="history")
        yield Static("", id="decode-label", classes="history history-label -decode")
        yield Sparkline([], id="decode-history", classes="history")

    # --- what the shell calls ---------------------------------------------------------
    def show_prefill_progress(self, event: PrefillProgress) -> None:
        self.progress = event
        self._paint()

    def show_prefill(self, event: PrefillDone) -> None:
        self.prefill, self.live, self.progress = event, None, None
        self._paint()

    def show_live(self, live: LiveDecode) -> None:
        self.live = live
        self._paint()

    def show_turn(self, record: TurnRecord) -> None:
        self.last_record, self.prefill, self.live, self.progress = record, None, None, None
        self.history.append(record)
        self._paint()
        self._paint_history()

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
            if live is not None:
                shown |= {"decode_tokens": count(live.decode_tokens), "decode_ms": ms(live.decode_ms),
                          "decode_tps": tps(live.decode_tps)}
                if live.threads:
                    shown |= {"threads": threads_line(live.threads, live.threads_reason)}
            return shown
        r = self.last_record
        if r is None:
            return {}
        shown = {"prefill_tokens": count(r.prefill_tokens), "cached_tokens": count(r.cached_tokens),
                 "prefill_ms": ms(r.prefill_ms), "prefill_tps": tps(r.prefill_tps), "ttft_ms": ms(r.ttft_ms),
                 "decode_tokens": count(r.decode_tokens), "decode_ms": ms(r.decode_ms),
                 "decode_tps": tps(r.decode_tps), "finish_reason": r.finish_reason}
        if r.restored_tokens:  # the first turn after a session resume
            shown |= {"restored_tokens": count(r.restored_tokens), "restore_ms": ms(r.restore_ms)}
        if isinstance(r.extra.get("threads"), int):
            shown |= {"threads": threads_line(r.extra["threads"], str(r.extra.get("threads_reason", "")))}
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
        f = self.figures
        if not f:
            return Text("no turn yet", style="italic")
        lines = [f"prefill {f['prefill_tokens']} tok, {f['cached_tokens']} cached",
                 f"  {f['prefill_ms']} · {f['prefill_tps']}"]
        if "restored_tokens" in f:
            lines.insert(0, f"restored {f['restored_tokens']} tok from the session in {f['restore_ms']}")
        if "ttft_ms" in f:
            lines.append(f"first token {f['ttft_ms']}")
        if "decode_tokens" in f:
            lines += [f"decode {f['decode_tokens']} tok" + (" (live)" if self.streaming else ""),
                      f"  {f['decode_ms']} · {f['decode_tps']}"]
        elif self.streaming:
            lines.append("decode …")
        if "threads" in f:
            lines.append(f"  {f['threads']}")
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
            rates = [getattr(r, f"{phase}_tps") for r in self.history]
            label = f"{phase} tok/s {min(rates):,.0f}–{max(rates):,.0f}" if rates else ""
            self.query_one(f"#{phase}-label", Static).update(label)
            self.query_one(f"#{phase}-history", Sparkline).data = rates

    def on_mount(self) -> None:
        self._paint()
        self._paint_history()
