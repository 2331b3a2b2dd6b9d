"""Stop thinking and answer through a real terminal (issue 37): chatapp in tmux on the default
model given an R1-shaped template, sent the byte Ctrl+G is (0x07) while the thought streams; the
thought folds, its title says it was cut by answer now, and the model answers."""

from __future__ import annotations

import shutil

import pytest

from tests.engine.chat.thinking_templates import R1_SHAPED
from tests.gguf_copy import copies_with_templates
from tests.ui._tmux import Tmux

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux")


def test_ctrl_g_in_a_terminal_stops_the_thought_and_the_model_answers(isolated_env, default_model_path, tmp_path):
    model = tmp_path / "r1-shaped.gguf"
    copies_with_templates(default_model_path, {model: R1_SHAPED})
    config = tmp_path / "config" / "chatapp" / "config.toml"
    config.parent.mkdir(parents=True, exist_ok=True)
    # Greedy, this question's thought runs past 600 tokens unstopped: the key lands inside it
    # however slow the machine. Where it lands moves the answer after it: cut after 13 tokens,
    # the answer repeated "The sea is a" for 291 tokens and scrolled the thought's title off a
    # 60-row screen. 200 rows hold the longest answer max_tokens allows (2 rows per 5 tokens).
    config.write_text("threads = 2\ntemperature = 0.0\nmax_tokens = 300\nincognito = true\n")
    term = Tmux(dict(isolated_env), ["--ctx", "2048", "--model", str(model)], height=200)
    try:
        term.wait_for("KV cache", 60)
        term.type("Tell me about the sea.")
        term.keys("Enter")
        term.wait_for("Thinking…", 120)
        term.keys("C-g")
        term.wait_for("this turn wrote", 120)
        screen = term.wait_for("cut by answer now", 10)
        assert "Thinking…" not in screen
    finally:
        term.close()
