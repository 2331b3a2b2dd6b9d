"""The panels beside the transcript (below it when narrow): tabs over one stack of panels, the
chosen one shown. The App hands in the panels, already bound to what it shows, and decides when
the deck is shown at all (F2, and the width); the deck only switches between them (F3, a tab)."""

from __future__ import annotations

from textual import on
from textual.app import ComposeResult
from textual.containers import Vertical, VerticalScroll
from textual.widget import Widget
from textual.widgets import Tab, Tabs

PANELS = (("tokens", "Tokens"), ("kv", "KV cache"), ("speed", "Speed"), ("quant", "Model"))
"""Each panel's key and its tab's title, in the order F3 steps through them."""


class PanelDeck(Vertical):
    def __init__(self, panels: dict[str, Widget], *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.panels = panels
        self._tabs = Tabs(*(Tab(title, id=f"tab-{key}") for key, title in PANELS), id="panel-tabs")
        self._stack = VerticalScroll(id="panel-stack")

    def compose(self) -> ComposeResult:
        yield self._tabs
        with self._stack:
            yield from self.panels.values()

    def next_panel(self) -> None:
        self._tabs.action_next_tab()

    @on(Tabs.TabActivated, "#panel-tabs")
    def _chosen(self, event: Tabs.TabActivated) -> None:
        chosen = event.tab.id.removeprefix("tab-") if event.tab and event.tab.id else PANELS[0][0]
        for key, panel in self.panels.items():
            panel.set_class(key == chosen, "-current")
            if key == chosen:
                self._stack.scroll_to_widget(panel, animate=False)
