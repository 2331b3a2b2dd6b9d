"""F6: the saved sessions. Open, new, save as, rename, delete, and search every message (/).

The screen lists sessions and asks for names and confirmations. Every action goes to the app
as a `SessionsScreen.Request`: the app owns the engine and the open session, so it checks
whether the action may run now (not while a reply is being written) and then does it.
"""

from __future__ import annotations

import time
from typing import Literal

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal
from textual.message import Message
from textual.widgets import Button, DataTable, Input, Label, Static

from chatapp.engine.sessions import SessionManager, validate_name
from chatapp.engine.sessions.search import Hit
from chatapp.errors import SessionError
from chatapp.format import count, human_bytes, one_line_text
from chatapp.ui.screens.dialog import Dialog
from chatapp.ui.screens.search import SearchScreen

SessionAction = Literal["open", "new", "save_as", "rename", "delete"]
"""What the screen asks the app to do with a session."""

COLUMNS = ("name", "first question", "model", "turns", "tokens", "state", "last used")
DIALOG_SHARE, DIALOG_MAX = 0.94, 120
"""The dialog's width: this share of the screen, at most this many columns (its CSS is made from them)."""
WRAPPED = {"name": 0.2, "first question": 0.5, "model": 0.3}
"""The columns that wrap, and their shares of what the figures leave: the figures never wrap."""
NARROW = 40
"""Below this many columns for the wrapped three, the model is left out (`sessions list` shows it)."""
EMPTY = "No saved sessions yet: n starts one, s saves this chat."


def when(ts: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(ts))


class SessionsScreen(Dialog[None]):
    FRAME_TITLE = "Sessions"
    BINDINGS = [
        Binding("o", "open", "Open", tooltip="Open the selected session (Enter too): it replaces this chat"),
        Binding("n", "new", "New", tooltip="Start a new, empty session under a name"),
        Binding("s", "save_as", "Save as", tooltip="Save this chat as a new session and keep saving into it"),
        Binding("r", "rename", "Rename", tooltip="Rename the selected session"),
        Binding("d,delete", "delete", "Delete", tooltip="Delete the selected session (asks first)"),
        Binding("slash", "search", "Search", tooltip="Search every saved message of every branch; Enter opens a hit"),
    ]

    DEFAULT_CSS = f"SessionsScreen > #dialog {{ width: {round(DIALOG_SHARE * 100)}%; max-width: {DIALOG_MAX}; }}" + """
    SessionsScreen #sessions-keys { color: $text-muted; width: 100%; }  /* wraps: at 80 columns it was cut */
    SessionsScreen DataTable { height: auto; max-height: 20; margin-top: 1; }
    SessionsScreen #sessions-empty { color: $text-muted; text-style: italic; margin-top: 1; }
    SessionsScreen #sessions-empty.-error { color: $error; text-style: bold; }
    """

    class Request(Message):
        """An action on a session for the app to carry out: open, new, save_as, rename or delete."""

        def __init__(self, origin: "SessionsScreen", action: SessionAction, session: str,
                     new_name: str | None = None, hit: Hit | None = None) -> None:
            super().__init__()
            self.origin = origin
            self.action = action
            self.session = session
            self.new_name = new_name
            self.hit = hit
            """For "open": the search hit it comes from, opened on its branch with its message selected."""

    def __init__(self, manager: SessionManager, current: str | None) -> None:
        super().__init__(frame_subtitle=str(manager.store.directory))
        self.manager = manager
        self.current = current
        self.names: list[str] = []
        self._rows: list[tuple[Text, ...]] = []
        """The cells of each session in `names`, as last read."""

    def compose_body(self) -> ComposeResult:
        yield Label("Enter/o open · n new · s save this chat as · r rename · d delete · / search · Esc close",
                    id="sessions-keys")
        yield DataTable(id="sessions-table", cursor_type="row", zebra_stripes=True)
        yield Static(EMPTY, id="sessions-empty", markup=False)

    def on_mount(self) -> None:
        self.reload()
        self.query_one(DataTable).focus()

    def on_resize(self) -> None:
        self._fill(self.selected)  # the columns' widths follow the terminal; the list is not read again

    def _widths(self, rows: list[tuple[Text, ...]]) -> dict[str, int | None]:
        """Each column's width in this terminal: the figures as wide as their widest cell, the
        wrapped columns sharing the rest, so no column hides behind a horizontal scroll (at 160
        columns the first question pushed turns, tokens, state and last use out of view)."""
        inner = min(int(self.app.size.width * DIALOG_SHARE), DIALOG_MAX) - 4 - 2  # border, padding, scrollbar
        widest = {name: max([len(name)] + [row[i].cell_len for row in rows]) for i, name in enumerate(COLUMNS)}
        shown = list(COLUMNS)
        left = inner - sum(widest[name] for name in shown if name not in WRAPPED) - 2 * len(shown)
        if left < NARROW:
            shown.remove("model")
            left += 2
        shares = {name: WRAPPED[name] for name in shown if name in WRAPPED}
        total = sum(shares.values())
        widths: dict[str, int | None] = {name: None for name in shown}
        for name, share in shares.items():
            widths[name] = max(8, min(widest[name], int(left * share / total)))
        return widths

    def reload(self, select: str | None = None) -> None:
        """Read the list again, keeping the cursor on `select` (or the current session)."""
        empty = self.query_one("#sessions-empty", Static)
        try:
            summaries = self.manager.store.summaries()
            problem = None
        except SessionError as exc:  # say it here: "no saved sessions" would read as if they were gone
            summaries, problem = [], exc.one_line()
            self.notify(problem, severity="error", markup=False)
        empty.update(f"Cannot read the saved sessions. {problem}" if problem else EMPTY)
        empty.set_class(problem is not None, "-error")
        self.names = [s.name for s in summaries]
        self._rows = []
        for s in summaries:
            size = self.manager.state_size(s.state_key)
            name = one_line_text(s.name) + (" (open)" if s.name == self.current else "")
            # a DataTable reads a str cell as markup: a saved name or question is given as Text
            self._rows.append((Text(name), Text(one_line_text(s.first_line)),
                               Text(one_line_text(f"{s.model} ({s.quant})")), Text(count(s.turns)),
                               Text(count(s.kv_tokens)), Text(human_bytes(size) if size is not None else "none"),
                               Text(when(s.updated_at))))
        self.query_one("#sessions-empty").display = not summaries
        self._fill(select or self.current)

    def _fill(self, select: str | None) -> None:
        """The table from the rows read last, its columns as wide as this terminal allows."""
        table = self.query_one(DataTable)
        table.clear(columns=True)
        widths = self._widths(self._rows)
        for label, width in widths.items():
            table.add_column(label, width=width, key=label)
        for name, row in zip(self.names, self._rows):
            table.add_row(*(cell for label, cell in zip(COLUMNS, row) if label in widths), key=name,
                          height=None)  # a wrapped cell makes its row taller
        if select in self.names:
            table.move_cursor(row=self.names.index(select))

    @property
    def selected(self) -> str | None:
        table = self.query_one(DataTable)
        if not self.names or not table.is_valid_row_index(table.cursor_row):
            return None
        return self.names[table.cursor_row]

    def _selected_or_say(self) -> str | None:
        name = self.selected
        if name is None:
            self.notify("no session selected", severity="warning")
        return name

    def _request(self, action: SessionAction, name: str, new_name: str | None = None) -> None:
        self.post_message(self.Request(self, action, name, new_name))

    # --- actions --------------------------------------------------------------------------
    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        event.stop()
        self.action_open()

    def action_open(self) -> None:
        name = self._selected_or_say()
        if name is not None:
            self._request("open", name)

    def action_search(self) -> None:
        def chosen(hit: Hit | None) -> None:
            if hit is not None:
                self.post_message(self.Request(self, "open", hit.session, hit=hit))

        self.app.push_screen(SearchScreen(self.manager), chosen)

    def action_new(self) -> None:
        def chosen(name: str | None) -> None:
            if name:
                self._request("new", name)

        self.app.push_screen(NameScreen("New session", "Name for a new, empty session:"), chosen)

    def action_save_as(self) -> None:
        def chosen(name: str | None) -> None:
            if name:
                self._request("save_as", name)

        self.app.push_screen(NameScreen("Save as", "Save this chat as a new session named:"), chosen)

    def action_rename(self) -> None:
        old = self._selected_or_say()
        if old is None:
            return

        def chosen(new: str | None) -> None:
            if new and new != old:
                self._request("rename", old, new)

        self.app.push_screen(NameScreen("Rename", f"New name for {old!r}:", old), chosen)

    def action_delete(self) -> None:
        name = self._selected_or_say()
        if name is None:
            return

        def answered(yes: bool | None) -> None:
            if yes:
                self._request("delete", name)

        question = f"Delete session {name!r}, its transcript and its KV state?"
        if name == self.current:
            question += " It is open: this chat stays on screen but is no longer saved."
        self.app.push_screen(ConfirmScreen(question), answered)


class NameScreen(Dialog[str | None]):
    """Asks for a session name; a name that isn't allowed is refused here, with the reason."""

    DEFAULT_CSS = "NameScreen > #dialog { width: 70%; max-width: 80; }"

    def __init__(self, title: str, prompt: str, initial: str = "") -> None:
        super().__init__(title)
        self.prompt = prompt
        self.initial = initial

    def compose_body(self) -> ComposeResult:
        yield Label(self.prompt, markup=False)
        yield Input(self.initial, placeholder="letters, digits, spaces and . _ - + @ =", id="session-name")

    def on_mount(self) -> None:
        self.query_one(Input).focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        try:
            name = validate_name(event.value)
        except SessionError as exc:
            self.notify(exc.one_line(), severity="error", markup=False)
            return
        self.dismiss(name)


class ConfirmScreen(Dialog[bool]):
    """Dismisses with True (y, Delete), False (n, No) or None (Esc)."""

    FRAME_TITLE = "Confirm"
    TONE = "warning"
    BINDINGS = [Binding("n", "answer(False)", "No"), Binding("y", "answer(True)", "Yes")]

    DEFAULT_CSS = """
    ConfirmScreen > #dialog { width: 70%; max-width: 80; }
    ConfirmScreen Label { width: 1fr; }
    ConfirmScreen Horizontal { height: auto; align-horizontal: right; }
    ConfirmScreen Button { margin-left: 1; }
    """

    def __init__(self, question: str, yes: str = "Delete") -> None:
        super().__init__()
        self.question = question
        self.yes = yes
        """The label of the button that answers yes."""

    def compose_body(self) -> ComposeResult:
        yield Label(f"{self.question} (y/n)", markup=False)
        with Horizontal():
            yield Button("No", id="no")
            yield Button(self.yes, id="yes", variant="error")

    def on_mount(self) -> None:
        self.query_one("#no").focus()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "yes")

    def action_answer(self, yes: bool) -> None:
        self.dismiss(yes)
