"""Peers' habits at the command line (issue 59): `chatapp run MODEL`, `chatapp "prompt"`,
options typed before the command, a model name a typo away, and chat commands typed as an
`ask` prompt."""

from __future__ import annotations

import json

from tests.cli.conftest import records


def test_a_quoted_question_is_asked(chatapp_exe):
    out = chatapp_exe("What is two plus two?", "--json", "-n", "4", "--threads", "1", "--incognito")
    assert 1 <= records(out)[-1]["generated_tokens"] <= 4  # asked, not "no such command"


def test_run_model_prompt_asks_that_model(chatapp_exe, gemma_path):
    out = chatapp_exe("run", str(gemma_path), "Hello there", "--json", "-n", "4", "--threads", "1", "--incognito")
    assert out.returncode == 0, out.stderr
    assert "is a base model" in out.stderr  # gemma, not the default model, answered


def test_run_model_opens_the_chat(chatapp_exe):
    out = chatapp_exe("run", "smollm2-135m-instruct")  # no terminal here: chat says so, not "no such command"
    assert out.returncode == 2
    assert "no such command" not in out.stderr and "the chat needs a terminal" in out.stderr


def test_options_before_the_command_go_after_it(chatapp_exe):
    out = chatapp_exe("-m", "smollm2-135m-instruct", "ask", "Hi", "-n", "3", "--json", "--threads", "1",
                      "--incognito")
    assert out.returncode == 0, out.stderr
    assert records(out)[-1]["generated_tokens"] <= 3


def test_a_mistyped_model_gets_did_you_mean(chatapp_exe):
    out = chatapp_exe("ask", "-m", "smolm2-135m-instruct", "Hi")
    assert out.returncode != 0
    line, = out.stderr.strip().splitlines()
    assert "did you mean 'smollm2-135m-instruct'?" in line
    assert "did you mean" not in chatapp_exe("ask", "-m", "zzzzqqq", "Hi").stderr


def test_a_chat_command_as_the_whole_prompt_is_refused_before_loading(chatapp_exe):
    for word in ("/bye", "/exit", "/help", "/?"):
        out = chatapp_exe("ask", word)
        assert out.returncode == 2
        line, = out.stderr.strip().splitlines()
        assert "ask has none" in line and f"'/{word}'" in line
    kept = json.loads(chatapp_exe("sessions", "list", "--json").stdout or "[]")
    assert kept["sessions"] == []  # nothing was sent, nothing kept


def test_two_slashes_send_the_text(chatapp_exe):
    out = chatapp_exe("ask", "//bye", "-n", "2", "--json", "--threads", "1", "--incognito")
    assert out.returncode == 0, out.stderr


def test_help_paragraphs_wrap_as_sentences_at_80_columns(chatapp_exe):
    """typer kept the docstring's line breaks after its first paragraph: at 80 columns a sentence
    broke where the source line ended ("estimate (the second" / "half of each full window")."""
    from chatapp.cli import joined_help

    out = chatapp_exe("perplexity", "--help")  # conftest's COLUMNS is 200: one sentence, one line
    assert "its estimate (the second half of each full window) is given beside the perplexity" in out.stdout
    assert joined_help("First.\n\nA long\n    sentence.\n- an item\n  goes on\n$ chatapp ask") == \
        "First.\n\nA long sentence.\n- an item goes on\n$ chatapp ask"
