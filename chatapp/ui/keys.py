"""Every key the App binds, in one list: the footer, the help screen (F1) and the key table in
docs/ all read it (chatapp.ui.app binds it; `help_sections` groups it with the widgets' and the
screens' own keys for F1)."""

from __future__ import annotations

import re

from textual.binding import Binding

from chatapp.ui.controllers import branches as branch_control
from chatapp.ui.screens.attention import AttentionScreen
from chatapp.ui.screens.sessions import SessionsScreen
from chatapp.ui.screens.tree import TreeScreen
from chatapp.ui.widgets.composer import Composer
from chatapp.ui.widgets.token_popup import TokenPopup
from chatapp.ui.widgets.tokens_panel import TokensPanel

APP_BINDINGS = [
    Binding("escape", "stop", "Stop", tooltip="Stop the reply being written; the partial reply is kept"),
    Binding("ctrl+c", "interrupt", "Stop/Quit", show=False, priority=True,
            tooltip="Stop the reply; when idle, copy the composer's selection, or press twice within "
                    "2 s to quit"),
    Binding("ctrl+q", "quit", "Quit", show=False, priority=True, tooltip="Quit chatapp"),
    Binding("ctrl+n", "new_chat", "New", tooltip="New chat (keeps the system prompt)"),
    Binding("ctrl+r", "regenerate", "Regen",
            tooltip="Regenerate the selected reply (else the last): a new reply beside it, ‹ n/m ›; "
                    "the old one stays"),
    Binding("ctrl+s", "system_prompt", "System", show=False, tooltip="Edit the system prompt"),
    Binding("ctrl+o", "sampling", "Sampling", show=False,
            tooltip="Set temperature, max tokens, top-k, top-p, min-p and the seed"),
    Binding("ctrl+l", "switch_model", "Model", show=False, tooltip="Switch model"),
    Binding("ctrl+t", "change_theme", "Theme", show=False,
            tooltip="Switch theme (previews as you move; Esc restores)"),
    Binding("f1", "help", "Help", tooltip="Show this help"),
    Binding("question_mark", "help", "Help", show=False,
            tooltip="Show this help (when the composer is not focused)"),
    Binding("f2", "toggle_panels", "Panels", tooltip="Show or hide the panels"),
    Binding("f3", "next_panel", "Next panel",
            tooltip="Next panel: Tokens, KV cache, Speed, Model (the tabs as the panels are titled)"),
    Binding("f4", "toggle_token_ids", "Ids", show=False, tooltip="Show or hide token ids in the Tokens panel"),
    Binding("f5", "copy_reply", "Copy", show=False, tooltip="Copy the last reply to the clipboard"),
    Binding("f6", "sessions", "Sessions", show=False, priority=True,  # the composer binds F6 too
            tooltip="Saved sessions: open, new, save this chat as, rename, delete"),
    Binding("f7", "anatomy", "Anatomy", show=False, priority=True,  # the composer binds F7 too
            tooltip="The model's anatomy: blocks, heads, experts, bytes per tensor family, KV cost per token"),
    Binding("f8", "detach", "Detach", show=False, tooltip="Remove an attachment (they are listed in the header)"),
    Binding("f9", "attention", "Attention", show=False, priority=True,
            tooltip="Attention in the last turn: which earlier tokens a reply token attended to, per layer "
                    "and head (the reply token selected in the Tokens panel, if any)"),
    Binding("f10", "toggle_confidence", "Confidence", show=False,
            tooltip="Confidence view: every reply on screen that has probabilities shaded by them (the replies "
                    "to come too); click a token for its alternatives before and after the sampler"),
    Binding("alt+p", "token_probs", "Tokens", show=False,
            tooltip="The selected reply's (else the last's) tokens: the alternatives of one next to it, ←/→ "
                    "for another, 1-9 to branch there; a reply written without probabilities is scored "
                    "first (one prefill pass over it)"),
    Binding("ctrl+g", "answer_now", "Answer now", show=False,
            tooltip="A thinking model: stop thinking and answer (the thought's closing marker is forced at "
                    "its next token)"),
    Binding("ctrl+f", "think_more", "Think more", show=False,
            tooltip="A thinking model's reply (the selected one, else the last): think on from the end of its "
                    "thought, then answer again beside it; the cache is cut back there, nothing is prefilled"),
    Binding("ctrl+p", "command_palette", "Palette", show=False,
            tooltip="Command palette: every action, and the theme picker"),
    *branch_control.BINDINGS,
]


def help_sections() -> list[tuple[str, list[Binding]]]:
    """The keys F1 lists, by where they work."""
    return [("In the composer", Composer.BINDINGS), ("Anywhere", APP_BINDINGS),
            ("On a reply token's alternatives (Alt+P, or click the token)", TokenPopup.BINDINGS),
            ("In the Tokens panel (or click a token)", TokensPanel.BINDINGS),
            ("In the attention view (F9)", AttentionScreen.BINDINGS),
            ("In the sessions list (F6)", SessionsScreen.BINDINGS),
            ("In the conversation tree (Alt+T)", TreeScreen.BINDINGS)]


def footer_key(shown: str) -> str:
    """A key as Textual's footer writes it ("^n", "f1", "esc") in the form the rest of chatapp
    writes keys ("^N", "F1", "Esc"): the footer showed "^J New line" beside "^n New"."""
    parts = []
    for part in shown.split("+"):
        if re.fullmatch(r"\^[a-z]", part) or re.fullmatch(r"f\d+", part):
            part = part.upper()
        elif part in ("esc", "tab", "enter", "space"):
            part = part.capitalize()
        parts.append(part)
    return "+".join(parts)
