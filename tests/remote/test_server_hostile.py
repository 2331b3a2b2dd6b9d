"""A llama-server that answers wrongly: `chatapp ask` gives one line, exits 2, keeps the reply
so far and never shows a traceback, the key or a raw escape sequence.

Each case puts tests/remote/rewriting_proxy.py in front of the session's real llama-server and
rewrites one answer: a shape llama-server never sends, a reply past n_predict or the context,
a stream that goes silent or sends only keep-alives, a line or an answer too long, a key or an
escape sequence echoed in an error.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from .rewriting_proxy import Reply, data, events_until, keep_alives, silence
from tests.remote.server_cli import SECRET, one_line

ASK = ("--temperature", "0", "--max-tokens", "24")
PIECES = 2
"""Pieces of the reply the proxy lets through before it rewrites the stream."""


def wrong_event(value):
    return lambda proxy: events_until(proxy, PIECES, lambda event: [data(value)])


def with_event(**changes):
    return lambda proxy: events_until(proxy, PIECES, lambda event: [data({**event, **changes})])


def pieces_text(proxy) -> str:
    return "".join(event["content"] for event in proxy.passed)


# --- answers of the wrong shape -------------------------------------------------------------------
ANSWERS = {
    "tokenize-a-list": ("/tokenize", lambda ask: [1, 2, 3], "/tokenize did not answer as a llama-server: the answer: "
                        "expected `object`, got `array`"),
    "tokenize-id-a-string": ("/tokenize", lambda ask: {"tokens": [{"id": "abc", "piece": "x"}]},
                             "tokens[0].id: expected `int`, got `str`"),
    "tokenize-no-id": ("/tokenize", lambda ask: {"tokens": [{"piece": "x"}]},
                       "tokens[0]: object missing required field `id`"),
    "tokenize-piece-byte-out-of-range": ("/tokenize", lambda ask: {"tokens": [{"id": 1, "piece": [300]}]},
                                         "tokens[0].piece[0]: expected `int` <= 255"),
    "apply-template-a-list": ("/apply-template", lambda ask: ["x"],
                              "/apply-template did not answer as a llama-server: the answer: expected `object`"),
    "props-without-a-context": ("/props", lambda ask: {**ask.upstream(), "default_generation_settings": {}},
                                "/props did not answer as a llama-server: default_generation_settings: object "
                                "missing required field `n_ctx`"),
}


@pytest.mark.parametrize("case", ANSWERS.values(), ids=ANSWERS.keys())
def test_an_answer_of_the_wrong_shape_is_one_line(chatapp_run, proxy, case):
    path, rule, fragment = case
    proxy.answers[path] = rule
    out = chatapp_run("ask", "Name a fruit.", "--server", proxy.url, *ASK)
    assert out.returncode == 2
    line = one_line(out.stderr)
    assert line.startswith(f"chatapp: Server: {proxy.url}") and fragment in line, line


STREAMS = {
    "error-a-string": (wrong_event({"error": "boom"}), "error: expected `object | null`, got `str`"),
    "error-code-a-string": (wrong_event({"error": {"code": "abc"}}), "error.code: expected `int`, got `str`"),
    "progress-total-a-string": (wrong_event({"prompt_progress": {"total": "x"}}),
                                "prompt_progress.total: expected `int`, got `str`"),
    "timings-a-string": (with_event(timings="none"), "timings: expected `object | null`, got `str`"),
    "tokens-a-number": (with_event(tokens=5), "tokens: expected `array`, got `int`"),
    "event-a-list": (wrong_event([1, 2]), "the answer: expected `object`, got `array`"),
}


@pytest.mark.parametrize("case", STREAMS.values(), ids=STREAMS.keys())
def test_a_stream_event_of_the_wrong_shape_keeps_the_reply_so_far(chatapp_run, proxy, case):
    rule, fragment = case
    proxy.stream = rule(proxy)
    out = chatapp_run("ask", "Write a long story about a ship.", "--server", proxy.url, *ASK)
    assert out.returncode == 2
    line = one_line(out.stderr)
    assert line.startswith(f"chatapp: Server: {proxy.url}/completion did not answer as a llama-server: "), line
    assert fragment in line and line.endswith("; the partial reply is kept"), line
    assert out.stdout.strip() == pieces_text(proxy).strip() != ""


# --- a server past the turn's bounds ----------------------------------------------------------------
def test_a_server_that_ignores_n_predict_is_cut_off_at_max_tokens(chatapp_run, proxy):
    proxy.requests["/completion"] = lambda body: {**body, "n_predict": -1}
    out = chatapp_run("ask", "Write a long story about a ship.", "--json", "--server", proxy.url,
                      "--temperature", "0", "--max-tokens", "5")
    assert out.returncode == 2
    line = one_line(out.stderr)
    assert line == (f"chatapp: Server: llama-server at {proxy.url} went on past the 5 tokens asked for "
                    "(max_tokens); the partial reply is kept"), line
    record = json.loads(out.stdout)
    assert record["generated_tokens"] == 5 and record["reply"]
    assert record["kv_used"] <= record["n_ctx"]


def test_a_server_that_counts_past_its_context_is_cut_off(chatapp_run, proxy):
    """What a server ignoring its context says: more tokens than its slot holds."""
    proxy.stream = events_until(proxy, PIECES, lambda event: [data({**event, "tokens_predicted": 5000})])
    out = chatapp_run("ask", "Write a long story about a ship.", "--server", proxy.url,
                      "--temperature", "0", "--max-tokens", "8000")
    assert out.returncode == 2
    line = one_line(out.stderr)
    assert line == (f"chatapp: Server: llama-server at {proxy.url} went on past its context of 1,024 tokens; "
                    "the partial reply is kept"), line
    assert out.stdout.strip() == pieces_text(proxy).strip()


def test_a_last_event_holding_more_than_the_context_is_refused(chatapp_run, proxy):
    def rule(lines):
        for line in lines:
            if line.startswith(b"data: ") and json.loads(line[6:]).get("stop"):
                line = data({**json.loads(line[6:]), "tokens_cached": 5373})
            yield line

    proxy.stream = rule
    out = chatapp_run("ask", "Name a fruit.", "--server", proxy.url, *ASK)
    assert out.returncode == 2
    assert "says its slot holds 5,373 tokens, more than its context of 1,024" in one_line(out.stderr)
    assert out.stdout.strip()


# --- silence, keep-alives and sizes -------------------------------------------------------------------
def stream_timeout(isolated_env, seconds: int) -> None:
    config = Path(isolated_env["XDG_CONFIG_HOME"]) / "chatapp" / "config.toml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(f"stream_timeout = {seconds}\n")


@pytest.mark.parametrize(("then", "fragment"), [
    (silence, "sent nothing for 3 s (stream_timeout)"),
    (keep_alives, "sent keep-alives but no progress for 3 s (stream_timeout)"),
], ids=["silent", "keep-alives"])
def test_a_stream_that_stops_sending_tokens_ends_with_one_line(chatapp_run, proxy, isolated_env, then, fragment):
    stream_timeout(isolated_env, 3)
    proxy.stream = events_until(proxy, PIECES, lambda event: then(proxy))
    out = chatapp_run("ask", "Write a long story about a ship.", "--server", proxy.url, *ASK)
    assert out.returncode == 2
    line = one_line(out.stderr)
    assert line == f"chatapp: Server: llama-server at {proxy.url} {fragment}; the partial reply is kept", line
    assert out.stdout.strip() == pieces_text(proxy).strip() != ""


def test_the_same_prompt_progress_again_and_again_is_no_progress(chatapp_run, proxy, isolated_env):
    stream_timeout(isolated_env, 3)

    def rule(lines):
        for line in lines:
            yield line
            if line.startswith(b"data: ") and "prompt_progress" in json.loads(line[6:]):
                while not proxy.closed.is_set():  # this one, again and again
                    yield 0.2
                    yield line + b"\n"

    proxy.stream = rule
    out = chatapp_run("ask", "Name a fruit.", "--server", proxy.url, *ASK)
    assert out.returncode == 2
    assert one_line(out.stderr) == (f"chatapp: Server: llama-server at {proxy.url} sent keep-alives but no progress "
                                    "for 3 s (stream_timeout)")


def endless_line(proxy):
    yield b"data: {\"content\": \""
    for _ in range(6 * 16):  # 6 MiB in 64 KiB chunks, and never a line end
        yield b"x" * 65536


def test_a_line_without_an_end_is_cut_off_at_its_cap(chatapp_run, proxy):
    proxy.stream = events_until(proxy, PIECES, lambda event: endless_line(proxy))
    out = chatapp_run("ask", "Write a long story about a ship.", "--server", proxy.url, *ASK)
    assert out.returncode == 2
    line = one_line(out.stderr)
    assert f"chatapp: Server: {proxy.url}/completion sent a line of more than 4.0" in line, line
    assert line.endswith("MiB: is it a llama-server?; the partial reply is kept"), line
    assert out.stdout.strip() == pieces_text(proxy).strip()


def test_an_answer_past_its_cap_is_refused_before_it_is_read(chatapp_run, proxy):
    """Ten million tokens for a short text, sent as they come (no length ahead)."""
    def ten_million_tokens(ask):
        return Reply(200, [b'{"tokens":[', *(b"1," * 500_000 for _ in range(20)), b"1]}"])

    proxy.answers["/tokenize"] = ten_million_tokens
    out = chatapp_run("ask", "Name a fruit.", "--server", proxy.url, *ASK)
    assert out.returncode == 2
    line = one_line(out.stderr)
    assert f"chatapp: Server: {proxy.url}/tokenize sent more than 4.0" in line, line
    assert "more than a llama-server answers to this" in line


# --- what a server says, shown safely -------------------------------------------------------------------
def echo_the_key(status: int):
    def rule(ask):
        said = ask.headers.get("Authorization", "")
        return Reply(status, json.dumps({"error": {"code": status, "message": f"bad header {said!r}",
                                                   "type": "server_error"}}).encode())
    return rule


@pytest.mark.parametrize("status", [500, 401])
def test_a_key_echoed_in_an_error_is_masked(chatapp_run, proxy, status):
    proxy.answers["/health"] = echo_the_key(status)
    out = chatapp_run("ask", "Hi", "--server", proxy.url, env={"CHATAPP_API_KEY": SECRET})
    assert out.returncode == 2
    line = one_line(out.stderr)
    assert SECRET not in out.stderr + out.stdout and "Bearer ***" in line, line


def test_a_key_with_a_control_character_is_refused_before_it_is_sent(chatapp_run, llama_server):
    out = chatapp_run("ask", "Hi", "--server", llama_server.url, "--api-key", SECRET + "\x01")
    assert out.returncode == 2
    line = one_line(out.stderr)
    assert line.startswith("chatapp: Config: api_key has a control character in it") and SECRET not in line, line
    padded = chatapp_run("ask", "Hi", "--server", llama_server.url, env={"CHATAPP_API_KEY": SECRET + " "})
    assert padded.returncode == 2
    assert one_line(padded.stderr) == "chatapp: Config: api_key starts or ends with a space; give the key without it"


HOSTILE = "evil\x1b]0;owned\x07\x1b[2J\nnext line"


def test_escape_sequences_in_a_servers_error_are_shown_escaped(chatapp_run, proxy):
    proxy.answers["/apply-template"] = lambda ask: Reply(500, json.dumps(
        {"error": {"code": 500, "message": HOSTILE, "type": "server_error"}}).encode())
    out = chatapp_run("ask", "Hi", "--server", proxy.url, *ASK)
    assert out.returncode == 2
    line = one_line(out.stderr)
    assert "\x1b" not in out.stderr and "\x07" not in out.stderr
    assert line == f"chatapp: Server: llama-server at {proxy.url}: " \
                   "evil\\x1b]0;owned\\x07\\x1b[2J\\nnext line (HTTP 500, server_error)", line


def test_escape_sequences_in_a_model_name_are_shown_escaped(chatapp_run, proxy):
    proxy.answers["/props"] = lambda ask: {**ask.upstream(), "model_path": f"/models/{HOSTILE}.gguf",
                                          "build_info": HOSTILE}
    out = chatapp_run("ask", "Name a fruit.", "--json", "--server", proxy.url, *ASK)
    assert out.returncode == 0, out.stderr
    record = json.loads(out.stdout)
    assert record["model"] == "evil\\x1b]0;owned\\x07\\x1b[2J\\nnext line.gguf"
    assert "\x1b" not in out.stdout + out.stderr


def test_a_slot_save_of_the_wrong_shape_is_one_notice_and_the_transcript_stays(chatapp_run, proxy):
    """The turn itself went well, so it stands (exit 0): the sessions report a KV state that
    could not be saved as one notice, whatever the reason (the engine's own test sees the
    backend raise the wrong answer: test_server_hostile_engine.py)."""
    proxy.answers["/slots/0?action=save"] = lambda ask: {"n_saved": "many"}
    out = chatapp_run("ask", "Name a fruit.", "--session", "s", "--server", proxy.url, *ASK)
    assert out.returncode == 0, out.stderr
    notices = [line for line in out.stderr.splitlines() if "KV state" in line]
    assert len(notices) == 1 and "Traceback" not in out.stderr, out.stderr
    assert "/slots/0?action=save did not answer as a llama-server: n_saved: expected `int`, got `str`" in notices[0]
    exported = chatapp_run("sessions", "export", "s", "--format", "json")
    assert [m["role"] for m in json.loads(exported.stdout)["messages"]][-2:] == ["user", "assistant"]
