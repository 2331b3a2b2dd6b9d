"""A branch from a token (`ask --branch-from REPLY --at-token K --token ID`) through the real
chatapp: its figures add up as every turn's do, and a control token, which no reply's text
can hold, is refused in one line with nothing saved."""

from __future__ import annotations

import json

from chatapp.engine.models.gguf_header import read_header
from tests.cli.conftest import records

ASK = ("ask", "--temperature", "0", "--threads", "2", "--max-tokens", "12", "--session", "t", "--json")


def tree(chatapp_exe) -> list[dict]:
    out = chatapp_exe("sessions", "tree", "t", "--json")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_a_token_branch_adds_up_and_a_control_token_is_refused(chatapp_exe, default_model_path):
    """Debatable point: the kept and chosen tokens went into the cache as the prompt's tail but
    not into prompt_tokens, so cached_tokens (27) exceeded prompt_tokens (25); and a control token
    chosen there left a reply whose saved text lacked it."""
    [first] = records(chatapp_exe(*ASK, "--logprobs", "5", "Name a fruit."))
    alternative = next(c for c in first["logprobs"][2]["top"][1:] if c["token"].strip())
    [branch] = records(chatapp_exe(*ASK, "--branch-from", first["message_id"], "--at-token", "2",
                                   "--token", str(alternative["id"]), "-"))
    assert branch["forced_tokens"] == 3 and branch["prompt_tokens"] == first["prompt_tokens"] + 3
    assert branch["cached_tokens"] + branch["prefill_tokens"] == branch["prompt_tokens"]
    assert branch["kv_used"] == branch["prompt_tokens"] + branch["generated_tokens"]
    before = tree(chatapp_exe)
    end_of_turn = read_header(default_model_path).metadata["tokenizer.ggml.eos_token_id"]
    out = chatapp_exe(*ASK, "--branch-from", first["message_id"], "--at-token", "2", "--token", str(end_of_turn), "-")
    errors = [line for line in out.stderr.splitlines() if line.startswith("chatapp:")]
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
    assert errors == [f"chatapp: Input: token {end_of_turn} (<|im_end|>) is a control token, not text: a reply's "
                      "saved text cannot hold it, so a branch cannot start with it; choose a token of text"]
    assert tree(chatapp_exe) == before and out.stdout == ""
