"""The KV cache: cells used out of n_ctx, by role, in bytes, and how many more turns fit.

Attachment text placed before a question is its own segment ("retrieved"), with its byte cost
and what placing it late did for the cache that turn: the conversation before it stayed a
reusable prefix, so only the new turn (the retrieved text and the question) was computed."""

from __future__ import annotations

from rich.text import Text
from textual.reactive import reactive

from chatapp.engine import kv
from chatapp.engine.backend import NOT_REPORTED
from chatapp.engine.chat.branch_states import BranchFigures
from chatapp.engine.chat.engine import ModelSummary
from chatapp.engine.chat.prompt_view import ROLES, TOOL_ROLES, role_counts
from chatapp.engine.stats import TurnRecord
from chatapp.format import count, human_bytes, percent
from chatapp.ui.shown import ShownBranch
from chatapp.ui.widgets.paint import UNDER_ONE_CELL, ThemedPanel, fg, fit, legend, stacked_bar, swatch


class KVPanel(ThemedPanel):
    """Draws the App's shown branch (chatapp.ui.shown), the live cells of a turn being written
    and the loaded model's cache capacity; it is bound to them and keeps no figure of its own."""

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

    branch: reactive[ShownBranch] = reactive(ShownBranch, init=False)
    live_cells: reactive[int | None] = reactive(None, init=False)
    """Cells in use while a turn runs (not yet split by role); None between turns."""
    model: reactive[ModelSummary | None] = reactive(None, init=False)

    def __init__(self, *, name: str | None = None, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(name=name, id=id, classes=classes)
        self.border_title = "KV cache"

    def watch_branch(self) -> None:
        self._changed()

    def watch_live_cells(self) -> None:
        self._changed()

    def watch_model(self) -> None:
        self._changed()

    # --- figures ------------------------------------------------------------------------
    @property
    def live(self) -> bool:
        """A reply streams: the bar shows cells used, not yet split by role."""
        return self.live_cells is not None

    @property
    def kv_used(self) -> int:
        return self.live_cells if self.live_cells is not None else self.branch.cells

    @property
    def n_ctx(self) -> int:
        return self.branch.n_ctx or (self.model.n_ctx if self.model is not None else 0)

    @property
    def bytes_per_token(self) -> int | None:
        """None (or 0) when the backend cannot tell, as a llama-server cannot."""
        turn = self.branch.turn
        if turn is not None:
            return turn.record.kv_bytes_per_token or None
        return self.model.kv_bytes_per_token if self.model is not None else None

    @property
    def kv_type(self) -> str:
        return (self.model.kv_type if self.model is not None else None) or "?"

    @property
    def record(self) -> TurnRecord | None:
        return self.branch.turn.record if self.branch.turn is not None else None

    @property
    def roles(self) -> dict[str, int]:
        return role_counts(list(self.branch.turn.view)) if self.branch.turn is not None else {}

    @property
    def note(self) -> str:
        return self.branch.note

    @property
    def pressure(self) -> str:
        return kv.pressure(self.kv_used, self.n_ctx)

    @property
    def forecast(self) -> int | None:
        return kv.forecast_turns(self.kv_used, self.n_ctx, list(self.branch.growths))

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
        bar = stacked_bar(segments, self.n_ctx, width, free)
        lines = [
            bar,
            Text(f"{count(self.kv_used)} / {count(self.n_ctx)} cells  {percent(kv.fill(self.kv_used, self.n_ctx))}"),
            self._bytes_line(width),
        ]
        if UNDER_ONE_CELL in bar.plain:  # the bar is out of proportion there, and says so
            lines.insert(1, Text(f"{UNDER_ONE_CELL} under one cell of the bar, drawn so it shows", style="dim"))
        if self.live:
            lines.append(Text("decoding…", style="italic"))
        elif self.record is not None:
            lines.append(legend([swatch(f"{role} {count(self.roles[role])}", fg(self, f"kv-{role}"))
                                 for role in (*ROLES, *TOOL_ROLES, "thought", "image")
                                 if self.roles.get(role) or role not in ("retrieved", "thought", "image", *TOOL_ROLES)],
                                width))
            lines.extend(self._retrieved_lines(width))
            lines.extend(self._tool_lines(width))
            lines.append(Text(f"reused from cache: {count(self.record.cached_tokens)} tok"))
            wrote = kv.turn_growth(self.record.kv_used, self.record.cached_tokens)
            lines.append(Text(f"this turn wrote: {count(wrote)} cells"))
            lines.append(self._forecast_line(width))
            lines.extend(self._reprefill_lines())
        elif (figures := self.branch.figures) is not None and figures.tokens:
            lines.append(self._branch_line(figures, width))
            lines.extend(self._reprefill_lines())
            if figures.cells > figures.cached + figures.reprefill:
                lines.append(Text(f"{count(figures.cells - figures.cached)} cells hold another path's tokens: "
                                  "the next turn overwrites them", style="dim"))
        if self.note and not self.live:
            lines.append(Text(f"⑂ {self.note}", style=fg(self, "accent")))
        warning = self._warning_line()
        if warning is not None:
            lines.append(warning)
        return Text("\n").join(lines)

    def _reprefill_lines(self) -> list[Text]:
        """What the next turn will prefill again because the template rewrites the history, said
        before the question is sent (the Tokens panel points at where it starts)."""
        figures = self.branch.figures
        if figures is None or not figures.reprefill:
            return []
        return [Text(f"next turn re-prefills {count(figures.reprefill)} tok: {figures.reprefill_reason}",
                     style=fg(self, "warning"))]

    def _bytes_line(self, width: int) -> Text:
        per_token = self.bytes_per_token
        if not per_token:
            return Text(f"bytes, KV type: {NOT_REPORTED}", style="dim")
        return fit(f"{human_bytes(self.kv_used * per_token)} of {human_bytes(self.n_ctx * per_token)}",
                   f"{self.kv_type}, {human_bytes(per_token)}/token", width)

    def _branch_line(self, figures: BranchFigures, width: int) -> Text:
        """The shown branch before any turn on it: its tokens, and how many the cache holds."""
        where = {"memory": "restored from memory", "disk": "restored from disk",
                 "session": "restored from the session"}.get(self.branch.restored, "in the cache")
        held = f"{count(figures.cached)} {where}"
        if figures.to_prefill:
            held += f", {count(figures.to_prefill)} to prefill"
        return fit(f"branch: {count(figures.tokens)} tok", held, width)

    def _retrieved_lines(self, width: int) -> list[Text]:
        """The retrieved segment's cost, and the cache consequence of this turn's block."""
        retrieved = self.roles.get("retrieved", 0)
        if not retrieved:
            return []
        lines = [fit(f"retrieved: {count(retrieved)} tok", human_bytes(retrieved * self.bytes_per_token), width)]
        view = self.branch.turn.view if self.branch.turn is not None else ()
        retrieved_now = sum(1 for item in view if item.role == "retrieved" and item.origin == "prefilled")
        if retrieved_now:
            record, now = self.record, count(retrieved_now)
            if record.cached_tokens:
                line = (f"placed late: the {count(record.cached_tokens)} tok before it came from the cache; "
                        f"{count(record.prefill_tokens)} prefilled ({now} retrieved)")
            else:
                line = (f"placed late: {count(record.prefill_tokens)} prefilled ({now} retrieved); "
                        "the next turn reuses it all")
            lines.append(Text(line, style=fg(self, "kv-retrieved")))
        return lines

    def _tool_lines(self, width: int) -> list[Text]:
        """What the offered tools' schemas cost: each one's tokens, the template's glue, and the
        time their prefill takes at this turn's prefill speed (paid again whenever the cache breaks)."""
        per_tool = self.record.extra.get("tool_schema_tokens") if self.record is not None else None
        if not per_tool:
            return []
        total = sum(per_tool.values()) + int(self.record.extra.get("tool_glue_tokens", 0))
        tps = self.record.prefill_tps
        took = f"≈ {total / tps * 1000:,.0f} ms to prefill" if tps > 0 else "prefill time: unknown"
        each = ", ".join(f"{name} {count(tokens)}" for name, tokens in per_tool.items())
        return [fit(f"tool schemas: {count(total)} tok", took, width),
                Text(f"  {each}, glue {count(total - sum(per_tool.values()))}", style=fg(self, "kv-tools"))]

    def _forecast_line(self, width: int) -> Text:
        turns = self.forecast
        if turns is None:
            return Text("room for: unknown")
        average = sum(self.branch.growths) / len(self.branch.growths)
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
