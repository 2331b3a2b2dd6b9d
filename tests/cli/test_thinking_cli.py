"""`chatapp ask --think-budget N` on the default model given an R1-shaped template: the JSON
record carries the thought apart from the reply, with its tokens and time, and the budget held."""

from __future__ import annotations

import json

import pytest

from tests.engine.chat.thinking_templates import R1_SHAPED
from tests.gguf_copy import copies_with_templates


@pytest.fixture(scope="module")
def r1_model(default_model_path, tmp_path_factory):
    path = tmp_path_factory.mktemp("thinking") / "r1-shaped.gguf"
    copies_with_templates(default_model_path, {path: R1_SHAPED})
    return path


def test_ask_json_carries_the_thought_apart_and_keeps_the_budget(chatapp_exe, r1_model):
    result = chatapp_exe("ask", "--model", str(r1_model), "--json", "--temperature", "0", "--max-tokens", "40",
                         "--think-budget", "6", "--thinking-history", "keep", "What is the capital of France?")
    assert result.returncode == 0, result.stderr
    record = json.loads(result.stdout.splitlines()[-1])
    assert record["thinking"].strip() and record["reply"].strip() and "</think>" not in record["reply"]
    assert record["thought_tokens_sampled"] == 6 and record["thinking_closed_by"] == "budget"
    assert 6 < record["thinking_tokens"] < record["decode_tokens"] and record["thinking_ms"] > 0
    assert "reprefill_expected" in record


def test_a_bad_history_choice_is_one_line(chatapp_exe, r1_model):
    result = chatapp_exe("ask", "--model", str(r1_model), "--thinking-history", "sometimes", "hi")
    assert result.returncode != 0 and "thinking_history must be one of template, keep" in result.stderr


def test_ask_prints_the_thought_dimmed_on_stderr_and_the_answer_alone_on_stdout(chatapp_exe, r1_model):
    result = chatapp_exe("ask", "--model", str(r1_model), "--temperature", "0", "--max-tokens", "24",
                         "--think-budget", "4", "What is the capital of France?")
    assert result.returncode == 0, result.stderr
    answer = result.stdout.strip()
    assert answer and "</think>" not in answer and "thinking:" not in result.stdout
    shown = result.stderr
    start, end = shown.index("thinking:"), shown.index("(end of thought)")
    thought = shown[start + len("thinking:"):end].strip()
    assert thought and "</think>" not in thought and thought not in answer


def ask_in_session(chatapp_exe, r1_model, history: str, question: str) -> dict:
    result = chatapp_exe("ask", "--model", str(r1_model), "--json", "--temperature", "0", "--max-tokens", "24",
                         "--think-budget", "6", "--thinking-history", history, "--session", history, question)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.splitlines()[-1])


def test_keep_in_a_session_reuses_the_whole_last_turn_in_the_next_process(chatapp_exe, r1_model):
    """The saved state holds the reply as decoded, thought and all; the next process renders it back
    token for token (the record's reply_as_decoded where the parts alone would not), so it is all reused."""
    first = ask_in_session(chatapp_exe, r1_model, "keep", "What is the capital of France?")
    second = ask_in_session(chatapp_exe, r1_model, "keep", "And of Italy?")
    assert second["cached_tokens"] == first["prompt_tokens"] + first["generated_tokens"]
    assert second["reprefill_expected"] == 0 and second["reprefill_tokens"] == 0


def test_template_in_a_session_predicts_what_it_prefills_again(chatapp_exe, r1_model):
    ask_in_session(chatapp_exe, r1_model, "template", "What is the capital of France?")
    second = ask_in_session(chatapp_exe, r1_model, "template", "And of Italy?")
    assert second["reprefill_expected"] > 0  # the answer after the dropped thought
    assert abs(second["reprefill_tokens"] - second["reprefill_expected"]) <= 1
    assert second["prefill_tokens"] >= second["reprefill_expected"]


@pytest.mark.parametrize("keep", [("--incognito",), ("--session", "s")], ids=["kept nowhere", "kept"])
def test_think_more_answers_again_beside_the_reply_prefilling_nothing(chatapp_exe, r1_model, keep):
    """Kept too: the save between the two turns keeps the thought in the cache, though this
    template renders the path's prompt without it."""
    result = chatapp_exe("ask", "--model", str(r1_model), "--json", "--temperature", "0", "--max-tokens", "32",
                         "--think-budget", "6", "--think-more", "8", *keep, "What is the capital of France?")
    assert result.returncode == 0, result.stderr
    first, more = (json.loads(line) for line in result.stdout.splitlines()[-2:])
    assert more["think_more"] == 8 and more["think_more_from"] == "cache"
    assert more["prefill_tokens"] == 0 and more["cached_tokens"] == more["prompt_tokens"]
    assert more["parent_id"] == first["parent_id"] and more["message_id"] != first["message_id"]
    assert more["thinking"].startswith(first["thinking"].rstrip("\n")) and more["reply"].strip()
    bad = chatapp_exe("ask", "--model", str(r1_model), "--think-more", "-2", "hi")
    assert bad.returncode != 0 and "--think-more takes a number of tokens" in bad.stderr


def test_think_more_on_a_reply_without_a_thought_is_one_line_and_the_reply_is_still_kept(chatapp_exe):
    """The default model does not think: --think-more is refused after the reply, in one line, and
    that reply is kept."""
    result = chatapp_exe("ask", "--json", "--temperature", "0", "--max-tokens", "8", "--think-more", "8",
                         "Name a colour.")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines()[-1] == (
        "chatapp: Input: think more goes on from a reply with a thought: this one has none")
    [record] = [json.loads(line) for line in result.stdout.splitlines()]
    listed = json.loads(chatapp_exe("sessions", "list", "--json").stdout)["sessions"]
    assert [s["name"] for s in listed] == [record["session"]] == ["Name a colour"]
    exported = json.loads(chatapp_exe("sessions", "export", "Name a colour", "--format", "json").stdout)
    assert [m["content"] for m in exported["messages"] if m["role"] == "assistant"] == [record["reply"]]


def test_a_session_keeps_the_thinking_mode_it_was_asked_with(chatapp_exe, r1_model):
    """--think-budget 0 (off) with --session: the session keeps it, and the next ask in it thinks
    no more without being told; a budget given then holds over it, and is kept in its turn."""
    ask = ("ask", "--model", str(r1_model), "--json", "--temperature", "0", "--max-tokens", "16", "--session", "steer")
    first = chatapp_exe(*ask, "--think-budget", "0", "--thinking-history", "keep", "What is the capital of France?")
    assert first.returncode == 0, first.stderr
    assert json.loads(first.stdout.splitlines()[-1])["think"] == "off"
    second = chatapp_exe(*ask, "And of Italy?")
    assert second.returncode == 0, second.stderr
    record = json.loads(second.stdout.splitlines()[-1])
    assert record["think"] == "off" and record["thought_tokens_sampled"] == 0
    assert "session steer: thinking off, as it was left" in second.stderr
    assert "session steer: earlier thoughts keep, as it was left" in second.stderr
    third = chatapp_exe(*ask, "--think-budget", "5", "And of Spain?")
    assert json.loads(third.stdout.splitlines()[-1])["think"] == "5"
    fourth = chatapp_exe(*ask, "And of Portugal?")
    assert json.loads(fourth.stdout.splitlines()[-1])["think"] == "5"
    export = chatapp_exe("sessions", "export", "steer", "--format", "json")
    assert export.returncode == 0, export.stderr
    assert json.loads(export.stdout)["choices"] == {"think": "5", "history": "keep"}


def test_hide_thinking_prints_the_answer_alone_and_the_budget_message_is_forced(chatapp_exe, r1_model):
    message = "Time is up."
    result = chatapp_exe("ask", "--model", str(r1_model), "--temperature", "0", "--max-tokens", "24",
                         "--think-budget", "4", "--think-budget-message", message, "--hide-thinking",
                         "What is the capital of France?")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() and "thinking:" not in result.stderr and message not in result.stderr
    shown = chatapp_exe("ask", "--model", str(r1_model), "--json", "--temperature", "0", "--max-tokens", "24",
                        "--think-budget", "4", "--think-budget-message", message, "--hide-thinking",
                        "What is the capital of France?")
    record = json.loads(shown.stdout.splitlines()[-1])
    assert record["thinking"].rstrip().endswith(message)  # --json keeps the thought
