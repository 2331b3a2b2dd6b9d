"""/ in the sessions list (F6): search every saved message of every branch, and open a hit.

The screen asks the engine's search (chatapp.engine.sessions.search) as the query is typed and
lists the hits newest first, each with its context and its match marked. Choosing one
dismisses the screen with the hit; the app opens its session on the hit's branch.
"""

from __future__ import annotations

import re
import time

from rich.text import Text
from textual.app import ComposeResult
from textual.widgets import Input, Label, OptionList, Static
from textual.widgets.option_list import Option

from chatapp.engine.sessions import SessionManager
from chatapp.engine.sessions.search import Hit, search
from chatapp.errors import ChatappError
from chatapp.format import one_line_text
from chatapp.ui.screens.dialog import Dialog

LIMIT = 50
"""The most hits listed: searching 200,000 messages for them takes about 2 ms
(benchmarks/search.py), so the list follows each key typed."""


def hit_text(hit: Hit, when: str) -> Text:
    """A hit as the list shows it: its session, role and time, then its snippet with the matches
    in bold. Saved text goes in as Text, never as markup, its control characters escaped."""
    text = Text(f"{one_line_text(hit.session)} · {hit.role} · {when}{hit.where}"
                + ("" if hit.active else " · another branch") + "\n", style="dim")
    for piece, matched in hit.parts:  # each run of whitespace one space, kept where a piece meets a match
        text.append(one_line_text(re.sub(r"\s+", " ", piece)), style="bold reverse" if matched else "")
    return text


class SearchScreen(Dialog[Hit]):
    FRAME_TITLE = "Search every chat"
    DEFAULT_CSS = """
    SearchScreen OptionList { height: auto; max-height: 24; margin-top: 1; }
    SearchScreen #search-status { color: $text-muted; margin-top: 1; }
    SearchScreen #search-status.-error { color: $error; }
    """

    def __init__(self, manager: SessionManager) -> None:
        super().__init__(frame_subtitle="Enter opens a hit on its branch · Esc closes")
        self.manager = manager
        self.hits: list[Hit] = []

    def compose_body(self) -> ComposeResult:
        yield Label('Words, "a phrase", prefix*, AND, OR, NOT:', id="search-keys")
        yield Input(placeholder="search every saved message", id="search-query")
        yield OptionList(id="search-hits")
        yield Static("", id="search-status", markup=False)

    def on_mount(self) -> None:
        self.query_one(OptionList).display = False
        self.query_one(Input).focus()

    def on_input_changed(self, event: Input.Changed) -> None:
        self.find(event.value)

    def on_input_submitted(self, event: Input.Submitted) -> None:
        hits = self.query_one(OptionList)
        if self.hits:
            hits.highlighted = 0
            hits.focus()

    def find(self, query: str) -> None:
        status = self.query_one("#search-status", Static)
        listed = self.query_one(OptionList)
        problem = ""
        try:
            self.hits = search(self.manager.store, query, LIMIT) if query.strip() else []
        except ChatappError as exc:  # a query FTS5 can't read yet (an unclosed quote): said, not raised
            self.hits, problem = [], exc.one_line()
        listed.clear_options()
        listed.add_options([Option(hit_text(hit, time.strftime("%Y-%m-%d %H:%M", time.localtime(hit.created_at))))
                            for hit in self.hits])
        listed.display = bool(self.hits)
        status.set_class(bool(problem), "-error")
        status.update(problem or (f"{len(self.hits)} hit{'s' if len(self.hits) != 1 else ''}, newest first"
                                  + (" (the first 50)" if len(self.hits) == LIMIT else "")
                                  if query.strip() else ""))

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        event.stop()
        self.dismiss(self.hits[event.option_index])
