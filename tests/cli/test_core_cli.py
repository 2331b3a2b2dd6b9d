"""ask, tokenize and --version end to end through the installed script, on the real model."""

import json

import pytest
from tests.cli.ask_json import ASK_KEYS


def test_version_names_all_three(chatapp_exe):
    out = chatapp_exe("--version")
    assert out.returncode == 0
    lines = out.stdout.splitlines()
    assert lines[0].startswith("chatapp ")
    assert lines[1].startswith("llama-cpp-python 0.3")
    assert lines[2].startswith("llama.cpp ggml ")


def test_ask_json_one_object_per_turn(chatapp_exe):
    out = chatapp_exe("ask", "Name a fruit.", "Name another.", "--json", "--temperature", "0",
                      "--max-tokens", "12", "--ctx", "512")
    assert out.returncode == 0, out.stderr
    turns = [json.loads(line) for line in out.stdout.splitlines()]
    assert len(turns) == 2
    for turn in turns:
        assert ASK_KEYS <= set(turn)
        assert turn["quant"] == "Q4_1" and turn["backend"] == "CPU" and turn["n_ctx"] == 512
        assert turn["model"] == "smollm2-135m-instruct"
        assert turn["reply"]
    assert turns[0]["cached_tokens"] == 0
    assert 0 < turns[1]["prefill_tokens"] < turns[1]["prompt_tokens"]


def test_ask_streams_reply_then_a_stats_line(chatapp_exe):
    out = chatapp_exe("ask", "Say hello.", "--temperature", "0", "--max-tokens", "8", "--ctx", "512")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip()
    assert "prefill" in out.stderr and "decode" in out.stderr and "tok/s" in out.stderr


def test_ask_greedy_is_repeatable(chatapp_exe):
    args = ("ask", "Tell me about the moon.", "--json", "--temperature", "0", "--max-tokens", "20", "--ctx", "512")
    first, second = (json.loads(chatapp_exe(*args).stdout)["reply"] for _ in range(2))
    assert first == second


def test_ask_kv_type_q8_0(chatapp_exe):
    out = chatapp_exe("ask", "Hi", "--json", "--kv-type", "q8_0", "--temperature", "0", "--max-tokens", "4",
                      "--ctx", "512")
    assert out.returncode == 0, out.stderr
    record = json.loads(out.stdout)
    assert record["kv_bytes_per_token"] == 30 * 3 * 128 * 34 // 32


COPY = ("Repeat this sentence exactly: The keeper climbed the spiral stairs, trimmed the wick and "
        "polished the great glass lens until it shone.")
DRAFT_JSON_KEYS = {"draft", "draft_tokens", "draft_accepted", "decode_steps", "decode_bytes_per_token", "decode_gbps",
                   "memory_bandwidth_gbps"}


def test_ask_draft_gives_the_same_reply_and_says_what_it_drafted_and_read(chatapp_exe):
    # q8_0 on both sides: with drafting on, an f16 cache loads as q8_0 (kv_for_drafting), and
    # replies are compared within one KV type.
    common = ("ask", COPY, "Again, please.", "--json", "--temperature", "0", "--max-tokens", "40", "--ctx", "512",
              "--threads", "1", "--kv-type", "q8_0")
    on, off = chatapp_exe(*common, "--draft", "ngram", "--draft-max", "4"), chatapp_exe(*common, "--draft", "off")
    assert on.returncode == off.returncode == 0, on.stderr + off.stderr
    drafted, plain = ([json.loads(line) for line in out.stdout.splitlines()] for out in (on, off))
    # A fresh cache folder: the first turn drafts on the prior (a q8_0 cache, flash attention, no
    # repacked weights) and checks exactness after itself.
    assert drafted[0]["draft"] == "ngram" and drafted[0]["draft_check"] == "prior (checking after this turn)"
    assert drafted[0]["reply"] == plain[0]["reply"]
    assert drafted[1]["draft_check"] == "run"
    for with_drafts, without in zip(drafted[1:], plain[1:]):
        assert DRAFT_JSON_KEYS <= set(with_drafts) and DRAFT_JSON_KEYS <= set(without)
        assert with_drafts["reply"] == without["reply"]
        assert with_drafts["draft"] == "ngram" and with_drafts["timing"] == "wall clock"
        assert 0 <= with_drafts["draft_accepted"] <= with_drafts["draft_tokens"]
        assert with_drafts["decode_steps"] <= with_drafts["decode_tokens"]
        assert (without["draft"], without["draft_tokens"], without["draft_accepted"]) == ("off", 0, 0)
        assert without["decode_steps"] == without["decode_tokens"]
        for record in (with_drafts, without):
            assert record["decode_bytes_per_token"] > 96_576_768  # the weights a token reads, plus KV cells
            assert record["memory_bandwidth_gbps"] > 0 and record["decode_gbps"] > 0
    assert "drafting off" not in on.stderr


def test_tokenize_json_round_trips(chatapp_exe):
    text = "Hi 🦙 日本語  x"
    out = chatapp_exe("tokenize", text, "--json")
    assert out.returncode == 0, out.stderr
    tokens = json.loads(out.stdout)
    assert "".join(t["piece"] for t in tokens) == text
    assert all(set(t) == {"id", "piece", "special"} for t in tokens)


def test_tokenize_shows_count(chatapp_exe):
    out = chatapp_exe("tokenize", "Hello world")
    assert out.returncode == 0
    assert "2 tokens" in out.stdout
    assert out.stdout.splitlines()[0] == "Hello│ world"  # piped: the cut in text, as colour shows it in a terminal


@pytest.mark.parametrize("args, needle", [
    (("ask", ""), "prompt is empty"),
    (("ask", "   "), "prompt is empty"),
    (("tokenize", ""), "text is empty"),
    (("ask", "hi", "--model", "/nonexistent/model.gguf"), "not found"),
    (("ask", "hi", "--model", "no-such-model"), "unknown model"),
    (("ask", "hi", "--kv-type", "q5_9"), "kv_type"),
    (("ask", "word " * 2000, "--ctx", "256"), "context holds 256"),
    (("ask", "hi", "--draft", "eagle"), "Config: draft must be one of ngram, off, got 'eagle'"),
    (("ask", "hi", "--draft-max", "0"), "Config: draft_max must be 1 to 64, got 0"),
    (("chat", "--draft-max", "99"), "Config: draft_max must be 1 to 64, got 99"),
    (("chat", "--draft", "yes"), "Config: draft must be one of ngram, off"),
])
def test_bad_input_is_one_line_exit_2(chatapp_exe, args, needle):
    out = chatapp_exe(*args)
    assert out.returncode == 2, out.stderr
    assert needle in out.stderr
    assert "Traceback" not in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1


def test_non_gguf_and_truncated_gguf_are_rejected(chatapp_exe, tmp_path, default_model_path):
    text_file = tmp_path / "notes.gguf"
    text_file.write_text("not a model")
    truncated = tmp_path / "cut.gguf"
    truncated.write_bytes(default_model_path.read_bytes()[: 5_000_000])
    for path in (text_file, truncated):
        out = chatapp_exe("ask", "hi", "--model", str(path))
        assert out.returncode == 2
        assert "Traceback" not in out.stderr and len(out.stderr.strip().splitlines()) == 1
        assert "GGUF" in out.stderr or "truncated" in out.stderr


def test_ctrl_c_mid_generation_keeps_the_partial_reply(isolated_dirs, tmp_path):
    import os
    import signal
    import subprocess
    import sys
    import time
    from pathlib import Path

    exe = Path(sys.executable).with_name("chatapp")
    env = {**os.environ, **isolated_dirs}
    proc = subprocess.Popen([str(exe), "ask", "Write a very long story about a ship.", "Second prompt",
                             "--temperature", "0", "--max-tokens", "2000", "--ctx", "4096"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    first = proc.stdout.read(20)  # the reply has started streaming
    time.sleep(0.3)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    stderr = err.decode()
    assert proc.returncode == 130 and stderr.endswith("chatapp: interrupted\n"), stderr  # as a shell reports SIGINT
    assert first and (first + out).strip()
    assert "stopped" in stderr and "skipped the remaining 1 prompt" in stderr
    assert "Traceback" not in stderr


def test_options_without_a_command_open_the_chat(chatapp_exe):
    """`chatapp --model M --session S` is `chatapp chat --model M --session S`, as `ollama run` and
    `llm chat` users type it (it said "No such option: --model")."""
    for args in (("--model", "smollm2-135m-instruct", "--session", "trip"), ("--ctx", "512"), ("-m", "x")):
        out = chatapp_exe(*args)  # no terminal here: chat says so, which only chat does
        assert out.returncode == 2, out.stderr
        assert out.stderr.startswith("chatapp: Input: the chat needs a terminal"), (args, out.stderr)
    wrong = chatapp_exe("--model", "m", "--no-such-option")
    assert wrong.returncode == 2 and "No such option: --no-such-option" in wrong.stderr
    assert chatapp_exe("--version").stdout.startswith("chatapp ")


def test_the_root_help_shows_no_bool_after_its_flags(chatapp_exe):
    out = chatapp_exe("--help")
    assert out.returncode == 0
    lines = [line for line in out.stdout.splitlines() if "--version" in line or "--help" in line]
    assert len(lines) == 2 and not any("<bool>" in line for line in lines), lines
    assert "chat's options" in out.stdout
    for command in ("ask", "tokenize", "neighbours"):
        [json_line] = [line for line in chatapp_exe(command, "--help").stdout.splitlines()
                       if "--json" in line.split()[:3]]  # the option's own line, not help that names it
        assert "<bool>" not in json_line, (command, json_line)
