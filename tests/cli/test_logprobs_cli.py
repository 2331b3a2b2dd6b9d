"""`ask --logprobs N` end to end through the installed script, on the real model."""

import json

import pytest

from tests.cli.conftest import records

ENTRY = {"id", "token", "logprob", "p_sampled", "rank", "entropy", "top"}
CANDIDATE = {"id", "token", "logprob", "p_sampled"}


def test_each_json_record_carries_one_entry_per_generated_token(chatapp_exe):
    turns = records(chatapp_exe("ask", "Name a fruit.", "Name another.", "--json", "--logprobs", "3",
                                "--temperature", "0", "--max-tokens", "10", "--ctx", "512"))
    assert len(turns) == 2
    for turn in turns:
        entries = turn["logprobs"]
        assert len(entries) == turn["generated_tokens"] > 0
        assert "".join(e["token"] for e in entries) == turn["reply"]
        for entry in entries:
            assert set(entry) == ENTRY and len(entry["top"]) == 3
            assert all(set(c) == CANDIDATE for c in entry["top"])
            assert entry["rank"] == 1 and entry["p_sampled"] == 1.0  # greedy: the top-1, all its mass
            assert entry["top"][0]["id"] == entry["id"] and entry["logprob"] <= 0 <= entry["entropy"]


def test_without_logprobs_the_record_has_none(chatapp_exe):
    (turn,) = records(chatapp_exe("ask", "Name a fruit.", "--json", "--temperature", "0", "--max-tokens", "4",
                                  "--ctx", "512"))
    assert "logprobs" not in turn


@pytest.mark.parametrize("n", ["21", "-1"])
def test_out_of_range_is_one_line_and_exit_2(chatapp_exe, n):
    out = chatapp_exe("ask", "Hi", "--logprobs", n, "--json")
    assert out.returncode == 2
    expected = f"chatapp: Input: --logprobs takes 0 to 20 candidates per token, not {n}"
    assert out.stderr.strip().splitlines() == [expected]
    assert out.stdout == ""


def test_a_session_s_json_export_includes_them(chatapp_exe):
    (turn,) = records(chatapp_exe("ask", "Name a fruit.", "--session", "fruit", "--json", "--logprobs", "2",
                                  "--temperature", "0.8", "--seed", "3", "--max-tokens", "8", "--ctx", "512"))
    (plain,) = records(chatapp_exe("ask", "Name another.", "--session", "fruit", "--json", "--max-tokens", "4",
                                   "--ctx", "512"))
    out = chatapp_exe("sessions", "export", "fruit", "--format", "json")
    assert out.returncode == 0, out.stderr
    journal = json.loads(out.stdout)["journal"]
    assert journal[0]["logprobs"] == turn["logprobs"] and len(turn["logprobs"]) == turn["generated_tokens"]
    assert "logprobs" not in journal[1] and "logprobs" not in plain
    for entry in turn["logprobs"]:  # sampled at 0.8: the chain's distribution sharpens the raw one
        assert 0 < entry["p_sampled"] <= 1 and entry["rank"] >= 1
