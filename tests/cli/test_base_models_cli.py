"""Base models named as such in the CLI (issue 59): `models list`, `models info`, and a notice
as `ask` loads one; its reply stops at the fallback format's next turn."""

from __future__ import annotations

import json

import pytest

from tests.gguf_copy import copies_with_templates


@pytest.fixture(scope="module")
def templateless(default_model_path, tmp_path_factory):
    target = tmp_path_factory.mktemp("templateless") / "SmolLM2-no-template.gguf"
    copies_with_templates(default_model_path, {target: None})
    return target


def test_models_list_marks_the_catalogs_base_model(chatapp_exe):
    rows = {row["name"]: row for row in json.loads(chatapp_exe("models", "list", "--json").stdout)}
    assert rows["gemma-3-270m"]["base"] and "not tuned for chat" in rows["gemma-3-270m"]["base"]
    assert rows["smollm2-135m-instruct"]["base"] is None
    table = chatapp_exe("models", "list").stdout
    assert "gemma-3-270m (base)" in table and "smollm2-135m-instruct (base)" not in table


def test_models_info_says_which_kind(chatapp_exe, gemma_path, default_model_path, templateless):
    assert json.loads(chatapp_exe("models", "info", str(default_model_path), "--json").stdout)["base"] is None
    gemma = json.loads(chatapp_exe("models", "info", str(gemma_path), "--json").stdout)
    assert "not tuned for chat" in gemma["base"]
    shown = chatapp_exe("models", "info", str(templateless)).stdout
    assert "no chat template" in shown


@pytest.mark.parametrize("which", ["gemma", "templateless"])
def test_ask_says_so_on_load_and_the_reply_stops_at_the_next_turn(chatapp_exe, which, gemma_path, templateless):
    path = gemma_path if which == "gemma" else templateless
    out = chatapp_exe("ask", "-m", str(path), "--threads", "1", "-n", "200", "--json", "--incognito",
                      "What is the capital of France?")
    assert out.returncode == 0, out.stderr
    assert "is a base model" in out.stderr.splitlines()[0] or any(
        "is a base model" in line for line in out.stderr.splitlines())
    record = json.loads(out.stdout.splitlines()[-1])
    reply = record.get("reply", "")
    assert "user:" not in reply and "assistant:" not in reply, reply
    assert record["generated_tokens"] < 200


def test_a_chat_model_gets_no_such_notice(chatapp_exe):
    out = chatapp_exe("ask", "--threads", "1", "-n", "4", "--incognito", "Hi")
    assert out.returncode == 0, out.stderr
    assert "base model" not in out.stderr


def test_models_info_takes_the_model_as_ask_does(chatapp_exe, gemma_path):
    """`-m` was "No such option: -m" for a newcomer who learnt it from ask."""
    by_option = chatapp_exe("models", "info", "-m", str(gemma_path), "--json")
    assert by_option.returncode == 0, by_option.stderr
    assert json.loads(by_option.stdout) == json.loads(chatapp_exe("models", "info", str(gemma_path), "--json").stdout)
    both = chatapp_exe("models", "info", str(gemma_path), "-m", "other")
    assert both.returncode == 2 and "give the model once" in both.stderr
