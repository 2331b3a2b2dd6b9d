"""Focus is never lost (issue 59, item 1), swept in a real terminal: chatapp in tmux, one turn
written, then each dialog, screen and popup opened with the bytes its key sends, acted on or
closed, and a word typed after it, which must land in the composer."""

from __future__ import annotations

import shutil

import pytest

from tests.ui._tmux import chat_after_one_turn

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux")

SWEEP = (
    # (what, the keys that open it, what it shows, the keys that act on it or close it)
    ("help", ("F1",), "Keys · Esc closes", ("Escape",)),
    ("system prompt", ("C-s",), "System prompt", ("Escape",)),
    ("sampling, applied", ("C-o",), "Sampling", ("Enter",)),
    ("model picker", ("C-l",), "Switch model", ("Escape",)),
    ("theme picker", ("C-t",), "theme", ("Escape",)),
    ("sessions", ("F6",), "Enter/o open", ("Escape",)),
    ("anatomy", ("F7",), "Anatomy", ("Escape",)),
    ("attention", ("F9",), "Attention · last turn", ("Escape",)),
    ("palette", ("C-p",), "Search for commands", ("Escape",)),
    ("tree", ("M-t",), "Conversation tree", ("Escape",)),
    ("token popup", ("M-p",), "1–9 branch", ("Escape",)),
    ("delete, refused", ("M-Up", "M-d"), "Delete message", ("n",)),
    ("fork", ("M-n",), "Fork the shown path", ("Escape",)),
    ("continue here, cancelled", ("M-Down", "M-c"), "branches after reply", ("Escape",)),
    ("attach, as /attach", ("/attach", "Enter"), "Attach a file or folder", ("Escape",)),
    ("token popup, branched from", ("M-p",), "1–9 branch", ("2",)),  # the keys were lost here once
)


@pytest.fixture
def chat(isolated_env):
    with chat_after_one_turn(isolated_env, width=160, height=48) as term:
        yield term


def test_after_every_dialog_typing_lands_in_the_composer(chat):
    """One app for the whole sweep (a start and a turn are most of the cost); each step names
    itself when it fails."""
    term = chat
    for what, opening, shows, closing in SWEEP:
        term.keys(*opening)
        term.wait_for(shows, 30)
        term.keys(*closing)
        term.wait_gone(shows, 10)
        term.type("zqx")
        screen = term.wait_for("zqx", 10)
        assert "Message the model" not in screen, what  # the composer holds it, not another widget
        term.keys("C-u")
        term.wait_for("Message the model", 10)
