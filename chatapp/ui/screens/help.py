"""F1 / ?: every key binding, read from the bindings themselves so the list never drifts."""

from __future__ import annotations

from collections.abc import Iterable

from rich import box
from rich.table import Table
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.widgets import Static

from chatapp.ui.screens.dialog import Dialog

NOTES = (
    "Ctrl+J inserts a new line everywhere; Shift+Enter and Alt+Enter only in terminals that report "
    "them (kitty, WezTerm, foot…): tmux and xterm send them as Enter.\n"
    "Ctrl+P opens the command palette: every action here is there too, and “Switch theme” "
    "previews each theme as you move through the list (Esc puts the old one back).\n"
    "In the composer, /attach PATH attaches a file or folder (Tab completes the path; /attach alone "
    "opens the picker) and /detach NAME removes one; the header lists what is attached.\n"
    "The panels (F2 shows them, F3 steps through): Tokens, how the tokenizer cut your text and the last "
    "prompt, by where each token came from; KV cache, the model's short-term memory: cells used by role, "
    "what a turn or a branch switch reused; Speed, prefill and decode rates, drafting and the memory "
    "bandwidth that bounds decode; Model, the quantization, its tensor types, weights against the cache.\n"
    "Conversations are trees: each message is titled with its id, and ‹ n/m › when it has siblings. "
    "Alt+Up/Alt+Down (or a click) selects a message for the branch keys; Alt+Left/Alt+Right switch "
    "between siblings, restoring the branch's KV cache when it is kept (the KV and Tokens panels say "
    "what a switch or an edit cost). The selected message lists its actions under it (edit, regenerate, "
    "branch here, tokens): click one.\n"
    "F10 shades every reply that has probabilities by how likely each token was; click a token, or press "
    "Alt+P, for its alternatives next to it, and 1-9 to branch there. A reply written before F10 has "
    "none: Alt+P reads it back first (one prefill pass over it, said in tokens and milliseconds)."
)
NAMES = {"question_mark": "?", "escape": "Esc", "enter": "Enter", "ctrl": "Ctrl", "shift": "Shift", "alt": "Alt",
         "up": "Up", "down": "Down", "left": "Left", "right": "Right", "left_square_bracket": "[",
         "right_square_bracket": "]"}


def key_label(keys: str) -> str:
    """"ctrl+c,f1,q" -> "Ctrl+C / F1 / q": a lone letter keeps its case (Q would read as Shift+Q)."""
    labels = []
    for key in keys.split(","):
        parts = key.strip().split("+")
        labels.append("+".join(NAMES.get(p, p if len(p) == 1 and len(parts) == 1 else
                                        p.upper() if len(p) <= 3 else p.capitalize()) for p in parts))
    return " / ".join(labels)


def rows(bindings: Iterable[BindingType]) -> list[tuple[str, str]]:
    """(keys, what they do) for each described binding; bindings for the same action, or with the
    same tooltip (1 to 9 in the Tokens panel), merge, and a run of digits reads "1-9"."""
    merged: dict[str, list] = {}
    for binding in bindings:
        if isinstance(binding, Binding) and binding.description:
            what = binding.tooltip or binding.description
            entry = merged.setdefault(what if binding.tooltip else binding.action, [[], what])
            entry[0].append(key_label(binding.key))
    return [(digit_run(keys) or " / ".join(keys), what) for keys, what in merged.values()]


def digit_run(keys: list[str]) -> str | None:
    """"1-9" for the keys 1, 2, …, 9; None for anything else."""
    if len(keys) > 2 and all(k.isdigit() for k in keys) and [int(k) for k in keys] == list(
            range(int(keys[0]), int(keys[0]) + len(keys))):
        return f"{keys[0]}-{keys[-1]}"
    return None


def bindings_table(sections: list[tuple[str, Iterable[BindingType]]]) -> Table:
    table = Table(box=box.SIMPLE_HEAD, expand=True, show_edge=False, show_header=False, pad_edge=False)
    table.add_column("Key", max_width=22, style="bold")
    table.add_column("Action", ratio=1)
    for title, bindings in sections:
        table.add_row(title, "", style="italic", end_section=True)
        for key, what in rows(bindings):
            table.add_row(key, what)
        table.add_row("", "")
    return table


class HelpScreen(Dialog[None]):
    FRAME_TITLE = "Keys · Esc closes"
    FRAME = VerticalScroll
    BINDINGS = [Binding("f1,question_mark,q", "close", "Close")]

    DEFAULT_CSS = """
    HelpScreen > #dialog { width: 94%; max-width: 110; height: 92%; max-height: 92%; }
    HelpScreen #help-keys { height: auto; }
    HelpScreen #help-notes { color: $text-muted; margin-top: 1; height: auto; }
    """

    def __init__(self, sections: list[tuple[str, Iterable[BindingType]]]) -> None:
        super().__init__()
        self.table = bindings_table(sections)

    def compose_body(self) -> ComposeResult:
        yield Static(self.table, id="help-keys")
        yield Static(NOTES, id="help-notes", markup=False)

    def on_mount(self) -> None:
        # The frame scrolls: with the focus, Down, PageDown, End and the rest move through the list.
        self.query_one("#dialog").focus()
