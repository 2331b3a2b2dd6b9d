"""The model's quantization: file type, bits per weight, tensor-type mix, weights vs KV memory."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.text import Text
from textual.reactive import reactive

from chatapp.engine.backend import NOT_REPORTED
from chatapp.format import count, human_bytes, human_count, percent
from chatapp.ui.shown import ShownBranch
from chatapp.ui.widgets.paint import ThemedPanel, fg, fit, legend, stacked_bar, swatch

if TYPE_CHECKING:
    from chatapp.engine.chat.engine import ModelSummary
    from chatapp.engine.models.quant import ModelInfo

MIX_COLOURS = ("primary", "secondary", "accent", "success", "warning", "error")
"""Theme colours the tensor types take in turn, largest share first."""


class QuantPanel(ThemedPanel):
    DEFAULT_CSS = """
    QuantPanel {
        height: auto;
        border: round $panel-lighten-2;
        border-title-color: $text-muted;
        padding: 0 1;
    }
    """

    model: reactive[ModelSummary | None] = reactive(None, init=False)
    model_info: reactive[ModelInfo | None] = reactive(None, init=False)
    """The tensor scan of the loaded model's file (the App's: None until it is done)."""
    branch: reactive[ShownBranch] = reactive(ShownBranch, init=False)
    """The shown branch: its cells are "KV now". Not the live cells of a turn being written, which
    the KV panel shows: the mix and memory bars redrawn seven times a second would take the UI
    thread's time from decode, as this panel never did before."""

    def __init__(self, *, name: str | None = None, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(name=name, id=id, classes=classes)
        self.border_title = "Model"

    def watch_model(self) -> None:
        self.redraw()

    def watch_model_info(self) -> None:
        self.redraw()

    def watch_branch(self) -> None:
        self.redraw()

    @property
    def summary(self) -> ModelSummary | None:
        return self.model

    @property
    def info(self) -> ModelInfo | None:
        return self.model_info

    @property
    def kv_used(self) -> int:
        """Cells the shown branch holds (the KV panel's figure between turns)."""
        return self.branch.cells

    # --- figures ------------------------------------------------------------------------
    @property
    def kv_full_bytes(self) -> int:
        s = self.summary
        return s.n_ctx * (s.kv_bytes_per_token or 0) if s else 0

    @property
    def kv_outgrows_weights(self) -> bool:
        return self.info is not None and self.kv_full_bytes > self.info.weight_bytes

    # --- drawing ------------------------------------------------------------------------
    def draw(self, width: int) -> Text:
        s = self.summary
        if s is None:
            return Text("no model loaded", style="italic")
        lines = [Text(s.name, style="bold")]
        if s.projector:  # a vision model: what its projector reads, and what an image costs
            lines.append(Text(s.projector, style=fg(self, "kv-image")))
        if self.info is None and not s.local_file:
            lines += self._reported(s)
        elif self.info is None:
            lines += [Text(f"quant {s.quant}"), Text("scanning tensors…", style="italic")]
        else:
            info = self.info
            lines.append(Text(f"{info.file_type} · {info.bits_per_weight:.2f} bits/weight"))
            lines.append(Text(f"{human_count(info.n_params)} params · {human_bytes(info.weight_bytes)}"))
            lines += self._mix(info, width)
        lines += self._memory(s, width)
        return Text("\n").join(lines)

    def _reported(self, s: ModelSummary) -> list[Text]:
        """A model file this machine cannot read (a llama-server's): what the backend reports."""
        bits = (f"{s.size_bytes * 8 / s.n_params:.2f} bits/weight" if s.size_bytes and s.n_params
                else f"bits/weight {NOT_REPORTED}")
        lines = [Text(f"{s.quant or 'quant ' + NOT_REPORTED} · {bits}")]
        if s.n_params and s.size_bytes:
            lines.append(Text(f"{human_count(s.n_params)} params · {human_bytes(s.size_bytes)}"))
        return lines + [Text(f"tensor types: {NOT_REPORTED}", style="dim")]

    def _mix(self, info: ModelInfo, width: int) -> list[Text]:
        styles = {name: fg(self, MIX_COLOURS[i % len(MIX_COLOURS)])
                  for i, name in enumerate(info.tensor_mix)}
        segments = [(stats.bytes, styles[name]) for name, stats in info.tensor_mix.items()]
        entries = [swatch(f"{name.lower()} {human_bytes(stats.bytes)} {percent(stats.bytes / info.weight_bytes)}"
                          f" ({count(stats.count)})", styles[name])
                   for name, stats in info.tensor_mix.items()]
        return [Text("tensor types, by bytes:", style="dim"),
                stacked_bar(segments, info.weight_bytes, width, fg(self, "kv-free")),
                legend(entries, width)]

    def _memory(self, s: ModelSummary, width: int) -> list[Text]:
        lines = [Text("memory:", style="dim")]
        if self.info is not None:
            lines.append(Text(f"weights  {human_bytes(self.info.weight_bytes)}"))
        elif s.size_bytes and not s.local_file:
            lines.append(Text(f"weights  {human_bytes(s.size_bytes)}"))
        if not s.kv_bytes_per_token:
            return lines + [Text(f"KV now   {count(self.kv_used)} tok"), Text(f"KV full  {count(s.n_ctx)} tok"),
                            Text(f"KV bytes, type: {NOT_REPORTED}", style="dim")]
        now = self.kv_used * s.kv_bytes_per_token
        lines += [fit(f"KV now   {human_bytes(now)}", f"{count(self.kv_used)} tok", width),
                  fit(f"KV full  {human_bytes(self.kv_full_bytes)}", f"{count(s.n_ctx)} tok", width),
                  Text(f"KV type  {s.kv_type}, {human_bytes(s.kv_bytes_per_token)}/tok")]
        if self.info is None:
            return lines
        lines += self._memory_bar(now, width)
        weights, full = human_bytes(self.info.weight_bytes), human_bytes(self.kv_full_bytes)
        if self.kv_outgrows_weights:
            lines.append(Text(f"KV at full context ({full}) > weights ({weights})",
                              style=fg(self, "warning", bold=True)))
        else:
            lines.append(Text(f"KV at full context is {percent(self.kv_full_bytes / self.info.weight_bytes)}"
                              f" of weights", style="dim"))
        return lines

    def _memory_bar(self, kv_now: int, width: int) -> list[Text]:
        """Weights, then the KV cache as allocated for the full context, the used part first."""
        weights, used, free = fg(self, "secondary"), fg(self, "accent"), fg(self, "kv-free")
        total = self.info.weight_bytes + self.kv_full_bytes
        return [stacked_bar([(self.info.weight_bytes, weights), (kv_now, used)], total, width, free),
                legend([swatch("weights", weights), swatch("KV used", used), swatch("KV free", free)], width)]
