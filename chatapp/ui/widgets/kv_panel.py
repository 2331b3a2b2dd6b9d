"""The KV cache: cells used out of n_ctx, by role, in bytes, and how many more turns fit.

Attachment text placed before a question is its own segment ("retrieved"), with its byte cost
and what placing it late did for the cache that turn: the conversation before it stayed a
reusable prefix, so only the new turn (the retrieved text and the question) was computed."""

from __future__ import annotations

from collections import deque

from rich.text import Text

from chatapp.engine import kv
from chatapp.engine.backend import NOT_REPORTED
from chatapp.engine.events import PromptToken
from chatapp.engine.chat.prompt_view import ROLES, role_counts
from chatapp.engine.stats import TurnRecord
from chatapp.format import count, human_bytes, percent
from chatapp.ui.widgets.paint import ThemedPanel, fg, fit, legend, stacked_bar, swatch

FORECAST_WINDOW = 5
"""Recent turns whose average size the forecast goes by."""


class KVPanel(ThemedPanel):
    DEFAULT_CSS = """
    KVPanel {
        height: auto;
        border: round $panel-lighten-2;
        border-title-color: $text-muted;
        padding: 0 1;
    }
    KVPanel.-warn { border: round $warning; border-title-color: $warning; }
    KVPanel.-critical { border: round $error; border-title-color: $error; }
    """

    def __init__(self, *, name: str | None = None, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(name=name, id=id, classes=classes)
        self.border_title = "KV cache"
        self.n_ctx = 0
        self.bytes_per_token: int | None = 0
        """None (or 0 in a record) when the backend cannot tell, as a llama-server cannot."""
        self.kv_type: str | None = ""
        self.kv_used = 0
        self.live = False
        """True while a reply streams: the bar shows cells used, not yet split by role."""
        self.record: TurnRecord | None = None
        self.roles: dict[str, int] = {}
        self.retrieved_now = 0
        """Retrieved tokens the last turn computed (its own block); the rest were reused."""
        self.growths: deque[int] = deque(maxlen=FORECAST_WINDOW)
        self.restored = 0
        """Cells a session resume loaded, until the next turn splits them by role."""
        self.note = ""
        """What the last switch of branch, or branching turn, cost the cache (chatapp.ui.branch_control)."""

    # --- what the shell calls ---------------------------------------------------------
    def set_capacity(self, n_ctx: int, bytes_per_token: int | None, kv_type: str | None) -> None:
        self.n_ctx, self.bytes_per_token, self.kv_type = n_ctx, bytes_per_token, kv_type
        self._changed()

    def show_live(self, kv_used: int) -> None:
        self.kv_used, self.live, self.restored = kv_used, True, 0
        self._changed()

    def show_restored(self, kv_used: int) -> None:
        """Another conversation was loaded (a session): its cells, not yet split by role."""
        self.reset()
        self.kv_used = self.restored = kv_used
        self._changed()

    def show_note(self, line: str) -> None:
        """What a switch of branch or a branching turn cost, until the next turn or switch."""
        self.note = line
        self._changed()

    def show_turn(self, record: TurnRecord, view: list[PromptToken]) -> None:
        self.record, self.live, self.restored, self.note = record, False, 0, ""
        self.kv_used = record.kv_used
        self.n_ctx, self.bytes_per_token = record.n_ctx, record.kv_bytes_per_token or None
        self.roles = role_counts(view)
        self.retrieved_now = sum(1 for item in view if item.role == "retrieved" and item.origin == "prefilled")
        self.growths.append(kv.turn_growth(record.kv_used, record.cached_tokens))
        self._changed()

    def reset(self) -> None:
        """A new conversation: forget the turns seen so far (capacity stays)."""
        self.record, self.kv_used, self.live, self.roles, self.restored = None, 0, False, {}, 0
        self.retrieved_now, self.note = 0, ""
        self.growths.clear()
        self._changed()

    # --- figures ------------------------------------------------------------------------
    @property
    def pressure(self) -> str:
        return kv.pressure(self.kv_used, self.n_ctx)

    @property
    def forecast(self) -> int | None:
        return kv.forecast_turns(self.kv_used, self.n_ctx, list(self.growths))

    def _changed(self) -> None:
        level = self.pressure
        self.set_class(level == "warn", "-warn")
        self.set_class(level == "critical", "-critical")
        self.redraw()

    # --- drawing ------------------------------------------------------------------------
    def draw(self, width: int) -> Text:
        if not self.n_ctx:
            return Text("no model loaded", style="italic")
        free = fg(self, "kv-free")
        # Cells not yet split by role (a reply streaming) take the primary colour.
        known = 0 if self.live else sum(self.roles.values())
        segments = [] if self.live else [(self.roles[role], fg(self, f"kv-{role}")) for role in self.roles]
        segments.append((max(self.kv_used - known, 0), fg(self, "primary")))
        lines = [
            stacked_bar(segments, self.n_ctx, width, free),
            Text(f"{count(self.kv_used)} / {count(self.n_ctx)} cells  {percent(kv.fill(self.kv_used, self.n_ctx))}"),
            self._bytes_line(width),
        ]
        if self.live:
            lines.append(Text("decoding…", style="italic"))
        elif self.record is not None:
            lines.append(legend([swatch(f"{role} {count(self.roles[role])}", fg(self, f"kv-{role}"))
                                 for role in ROLES if role != "retrieved" or self.roles[role]], width))
            lines.extend(self._retrieved_lines(width))
            lines.append(Text(f"reused from cache: {count(self.record.cached_tokens)} tok"))
            lines.append(Text(f"this turn wrote: {count(self.growths[-1])} cells"))
            lines.append(self._forecast_line(width))
        elif self.restored:
            lines.append(Text(f"restored from the session: {count(self.restored)} cells"))
        if self.note and not self.live:
            lines.append(Text(f"⑂ {self.note}", style=fg(self, "accent")))
        warning = self._warning_line()
        if warning is not None:
            lines.append(warning)
        return Text("\n").join(lines)

    def _bytes_line(self, width: int) -> Text:
        per_token = self.bytes_per_token
        if not per_token:
            return Text(f"bytes, KV type: {NOT_REPORTED}", style="dim")
        return fit(f"{human_bytes(self.kv_used * per_token)} of {human_bytes(self.n_ctx * per_token)}",
                   f"{self.kv_type or '?'}, {human_bytes(per_token)}/token", width)

    def _retrieved_lines(self, width: int) -> list[Text]:
        """The retrieved segment's cost, and the cache consequence of this turn's block."""
        retrieved = self.roles.get("retrieved", 0)
        if not retrieved:
            return []
        lines = [fit(f"retrieved: {count(retrieved)} tok", human_bytes(retrieved * self.bytes_per_token), width)]
        if self.retrieved_now:
            record, now = self.record, count(self.retrieved_now)
            if record.cached_tokens:
                line = (f"placed late: the {count(record.cached_tokens)} tok before it came from the cache; "
                        f"{count(record.prefill_tokens)} prefilled ({now} retrieved)")
            else:
                line = (f"placed late: {count(record.prefill_tokens)} prefilled ({now} retrieved); "
                        "the next turn reuses it all")
            lines.append(Text(line, style=fg(self, "kv-retrieved")))
        return lines

    def _forecast_line(self, width: int) -> Text:
        turns = self.forecast
        if turns is None:
            return Text("room for: unknown")
        average = sum(self.growths) / len(self.growths)
        return fit(f"room for ~{count(turns)} more turns", f"~{count(round(average))} tok each", width)

    def _warning_line(self) -> Text | None:
        level = self.pressure
        if level == "ok":
            return None
        filled = percent(kv.fill(self.kv_used, self.n_ctx))
        if level == "critical":
            return Text(f"▲ cache {filled} full: the oldest turns will be dropped",
                        style=fg(self, "error", bold=True))
        return Text(f"▲ cache {filled} full", style=fg(self, "warning", bold=True))
