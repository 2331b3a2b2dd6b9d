"""`chatapp ask` over --server end to end, through the installed script: every record key,
sessions across processes, and each way a server can fail."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.cli.ask_json import ASK_KEYS

from .conftest import START_LIMIT, free_port
from tests.remote.server_cli import SECRET, one_line

GREEDY = ("--temperature", "0", "--max-tokens", "24")

def test_ask_json_over_a_server_has_every_key(chatapp_run, llama_server):
    out = chatapp_run("ask", "Name a fruit.", "Name another.", "--json", "--server", llama_server.url, *GREEDY)
    assert out.returncode == 0, out.stderr
    turns = [json.loads(line) for line in out.stdout.splitlines()]
    assert len(turns) == 2
    for record in turns:
        assert ASK_KEYS | {"server", "server_timings", "generated_tokens", "finish_reason"} <= set(record)
        assert record["backend"] == "llama-server" and record["server"] == llama_server.url
        assert (record["model"], record["quant"], record["n_ctx"]) == ("smollm2-135m-instruct", "Q4_1", 1024)
        assert record["kv_bytes_per_token"] is None and record["layers_offloaded"] is None
        assert record["reply"] and record["decode_tps"] > 0 and record["prefill_ms"] > 0
    assert turns[1]["cached_tokens"] > 0
    assert turns[1]["prefill_tokens"] == turns[1]["prompt_tokens"] - turns[1]["cached_tokens"]


def test_the_server_comes_from_the_environment_or_the_config(chatapp_run, llama_server, isolated_env):
    config = Path(isolated_env["XDG_CONFIG_HOME"]) / "chatapp" / "config.toml"
    config.parent.mkdir(parents=True)
    config.write_text(f'server = "http://127.0.0.1:{free_port()}"\n')  # nothing listens there
    from_env = chatapp_run("ask", "Hi", "--json", *GREEDY, env={"CHATAPP_SERVER": llama_server.url})
    assert from_env.returncode == 0, from_env.stderr
    assert json.loads(from_env.stdout)["server"] == llama_server.url
    config.write_text(f'server = "{llama_server.url}"\n')
    from_file = chatapp_run("ask", "Hi", "--json", *GREEDY)
    assert from_file.returncode == 0 and json.loads(from_file.stdout)["backend"] == "llama-server"


def test_plain_ask_prints_the_reply_and_a_stats_line(chatapp_run, llama_server):
    out = chatapp_run("ask", "Say hello.", "--server", llama_server.url, *GREEDY)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() and "prefill" in out.stderr and "tok/s" in out.stderr


# --- sessions -----------------------------------------------------------------------------------
def test_a_session_resumes_in_another_process_with_the_same_greedy_reply(chatapp_run, another_server):
    server = another_server()
    args = ("--json", "--server", server.url, *GREEDY, "--system", "You are a concise assistant.")
    continuous = chatapp_run("ask", "Name a colour.", "Name another one.", *args)
    assert continuous.returncode == 0, continuous.stderr
    expected = json.loads(continuous.stdout.splitlines()[1])["reply"]
    erase(server.url)
    first = chatapp_run("ask", "Name a colour.", "--session", "s", *args)
    assert first.returncode == 0 and "not saved" not in first.stderr, first.stderr
    erase(server.url)  # what the second process finds in the slot is only what it restores
    second = chatapp_run("ask", "Name another one.", "--session", "s", *args)
    assert second.returncode == 0, second.stderr
    record = json.loads(second.stdout)
    assert record["restored_tokens"] > 0 and "state_fallback" not in record
    assert record["cached_tokens"] >= record["restored_tokens"] - 1
    assert record["reply"] == expected


def test_a_server_without_slot_files_saves_the_transcript_and_falls_back(chatapp_run, another_server):
    server = another_server(slot_files=False)
    args = ("--server", server.url, *GREEDY)
    first = chatapp_run("ask", "Name a colour.", "--session", "s", *args)
    assert first.returncode == 0, first.stderr
    assert "KV state not saved (llama-server at" in first.stderr and "--slot-save-path" in first.stderr
    second = chatapp_run("ask", "Name another one.", "--session", "s", "--json", *args)
    assert second.returncode == 0, second.stderr
    record = json.loads(second.stdout)
    assert record["restored_tokens"] == 0 and record["state_fallback"] == "no saved KV state"


def erase(url: str) -> None:
    httpx.post(f"{url}/slots/0?action=erase", json={}, timeout=60).raise_for_status()


SESSION = ("--session", "s", *GREEDY, "--system", "You are a concise assistant.")


def save_a_session(chatapp_run, server) -> dict:
    """Run one turn of session "s" on `server`; its record, its slot file saved there."""
    first = chatapp_run("ask", "Name a colour.", "--json", "--server", server.url, *SESSION)
    assert first.returncode == 0 and "not saved" not in first.stderr, first.stderr
    assert len(list(server.slot_dir.glob("chatapp-*.bin"))) == 1
    return json.loads(first.stdout)


def resume_falls_back(chatapp_run, server, reason: str, reply: str) -> dict:
    """Resume "s" on `server`: one line gives `reason`, nothing is restored, the turn re-prefills
    its whole prompt and both turns are in the transcript."""
    second = chatapp_run("ask", "Name another one.", "--json", "--server", server.url, *SESSION)
    assert second.returncode == 0, second.stderr
    notices = [line for line in second.stderr.splitlines() if "KV state" in line]
    assert len(notices) == 1 and "Traceback" not in second.stderr, second.stderr
    assert re.fullmatch(rf"session s: saved KV state not used \({re.escape(reason)}\); re-prefilling "
                        r"[1-9]\d* tokens from the transcript with the next turn", notices[0]), notices[0]
    record = json.loads(second.stdout)
    assert record["restored_tokens"] == 0 and record["state_fallback"] == reason
    assert record["cached_tokens"] == 0 and record["prefill_tokens"] == record["prompt_tokens"]
    assert record["reply"] and record["finish_reason"] in ("stop", "length")
    exported = chatapp_run("sessions", "export", "s", "--format", "json")
    assert exported.returncode == 0, exported.stderr
    said = [(m["role"], m["content"]) for m in json.loads(exported.stdout)["messages"]]
    assert said[-4:] == [("user", "Name a colour."), ("assistant", reply),
                         ("user", "Name another one."), ("assistant", record["reply"])]
    return record


def test_a_session_resumed_on_a_server_with_another_context_re_prefills(chatapp_run, another_server):
    """The fingerprint holds n_ctx: a state saved under -c 1024 is not offered to a -c 2048 server."""
    first = another_server()
    reply = save_a_session(chatapp_run, first)["reply"]
    first.stop()
    resume_falls_back(chatapp_run, another_server(n_ctx=2048), "other n_ctx (state 1024, now 2048)", reply)


def test_a_session_whose_slot_file_is_gone_re_prefills(chatapp_run, another_server):
    server = another_server()
    reply = save_a_session(chatapp_run, server)["reply"]
    for slot_file in server.slot_dir.glob("chatapp-*.bin"):
        slot_file.unlink()
    resume_falls_back(chatapp_run, server, "llama-server could not load the state", reply)


def test_a_slot_file_of_another_prompt_is_not_taken_for_the_sessions(chatapp_run, another_server):
    """The server restores any well-formed slot file; one saved from another prompt holds another
    token count (n_restored) than chatapp saved with the session, so chatapp erases the slot and
    re-prefills (server.py's restore_cache, the n_restored check)."""
    server = another_server()
    first = save_a_session(chatapp_run, server)
    (slot_file,) = server.slot_dir.glob("chatapp-*.bin")
    other = httpx.post(f"{server.url}/completion", timeout=120, json={
        "prompt": "Once upon a time, " * 20, "n_predict": 1, "cache_prompt": True, "id_slot": 0})
    other.raise_for_status()
    saved = httpx.post(f"{server.url}/slots/0?action=save", json={"filename": slot_file.name}, timeout=60)
    saved.raise_for_status()
    n_other = saved.json()["n_saved"]
    assert n_other > first["kv_used"] > 0  # the session saved the slot as its first turn left it
    # The server loads the file (this restore is no refusal): what turns it down is chatapp's check.
    restored = httpx.post(f"{server.url}/slots/0?action=restore", json={"filename": slot_file.name}, timeout=60)
    assert restored.status_code == 200 and restored.json()["n_restored"] == n_other
    erase(server.url)
    resume_falls_back(chatapp_run, server, "llama-server could not load the state", first["reply"])


# --- bad conditions -----------------------------------------------------------------------------
def test_nothing_listening_is_one_line_exit_2(chatapp_run):
    out = chatapp_run("ask", "Hi", "--server", f"http://127.0.0.1:{free_port()}")
    assert out.returncode == 2
    assert "Server: cannot connect to llama-server at http://127.0.0.1:" in one_line(out.stderr)


def test_a_bad_url_is_one_line_exit_2(chatapp_run):
    out = chatapp_run("ask", "Hi", "--server", "ftp://example.invalid/")
    assert out.returncode == 2 and "must be an http:// or https:// URL" in one_line(out.stderr)


def test_a_url_that_is_not_a_llama_server_is_one_line_exit_2(chatapp_run, tmp_path):
    port = free_port()
    web = subprocess.Popen([sys.executable, "-u", "-m", "http.server", str(port), "--bind", "127.0.0.1",
                            "--directory", str(tmp_path)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        assert b"Serving HTTP" in web.stdout.readline()
        out = chatapp_run("ask", "Hi", "--server", f"http://127.0.0.1:{port}")
        assert out.returncode == 2
        assert "is it a llama-server?" in one_line(out.stderr)
    finally:
        web.terminate()
        web.wait()


def test_the_api_key_is_used_and_never_shown(chatapp_run, another_server, isolated_env):
    server = another_server("--api-key", SECRET)
    wrong = chatapp_run("ask", "Hi", "--server", server.url, "--api-key", "not-" + SECRET)
    assert wrong.returncode == 2
    line = one_line(wrong.stderr)
    assert "refused the API key" in line and SECRET not in line and "not-" not in line
    missing = chatapp_run("ask", "Hi", "--server", server.url)
    assert missing.returncode == 2 and "refused the API key" in one_line(missing.stderr)
    right = chatapp_run("ask", "Hi", "--json", "--session", "k", "--server", server.url, *GREEDY,
                        env={"CHATAPP_API_KEY": SECRET})
    assert right.returncode == 0, right.stderr
    assert SECRET not in right.stdout + right.stderr
    exported = chatapp_run("sessions", "export", "k")
    assert exported.returncode == 0 and SECRET not in exported.stdout + exported.stderr
    for folder in (isolated_env["XDG_DATA_HOME"], isolated_env["XDG_CONFIG_HOME"], isolated_env["XDG_CACHE_HOME"]):
        for path in Path(folder).rglob("*"):
            if path.is_file():
                assert SECRET.encode() not in path.read_bytes(), path


def test_a_loading_server_is_waited_for(chatapp_popen, another_server, tmp_path):
    """llama-server answers 503 until its model is loaded. A control-vector file that is a
    FIFO holds it there (it opens the file after the model and before it is ready) until the
    test opens the other end; the empty control vector is then skipped and the server serves."""
    fifo = tmp_path / "control-vector.gguf"
    os.mkfifo(fifo)
    server = another_server("--control-vector", str(fifo), wait=False)
    deadline, status = time.monotonic() + START_LIMIT, None
    while status != 503:
        if time.monotonic() > deadline:
            pytest.fail(f"llama-server at {server.url} never answered /health with 503 (loading) in "
                        f"{START_LIMIT:.0f} s; last status {status}")
        try:
            status = httpx.get(f"{server.url}/health", timeout=5).status_code
        except httpx.HTTPError:
            time.sleep(0.1)
    ask = chatapp_popen("ask", "Say hi.", "--server", server.url, *GREEDY)
    first = ask.stderr.readline().decode()
    assert first.startswith(f"waiting: llama-server at {server.url} is loading its model"), first
    with open(fifo, "wb"):
        pass  # the server reads an empty file, skips it and finishes loading
    out, err = ask.communicate(timeout=300)
    assert ask.returncode == 0, err.decode()
    assert out.decode().strip()


def test_a_server_killed_mid_reply_keeps_what_was_said(chatapp_popen, another_server, chatapp_run):
    server = another_server()
    ask = chatapp_popen("ask", "Write a very long story about a ship.", "--server", server.url, "--session", "k",
                        "--temperature", "0", "--max-tokens", "2000")
    first = ask.stdout.read(8)  # the reply is streaming
    server.popen.kill()
    out, err = ask.communicate(timeout=120)
    stderr = err.decode()
    assert ask.returncode == 2, stderr
    assert first and (first + out).strip()
    lines = [line for line in stderr.strip().splitlines() if "KV state not saved" not in line]
    assert len(lines) == 1 and "Traceback" not in stderr
    assert "lost llama-server at" in lines[0] and "partial reply is kept" in lines[0]
    saved = chatapp_run("sessions", "export", "k")
    assert saved.returncode == 0 and first.decode(errors="ignore") in saved.stdout


def test_ctrl_c_mid_reply_stops_it_and_keeps_it(chatapp_popen, llama_server):
    ask = chatapp_popen("ask", "Write a very long story about a ship.", "Second prompt", "--server", llama_server.url,
                        "--temperature", "0", "--max-tokens", "2000")
    assert ask.stdout.read(8)  # the reply is streaming
    ask.send_signal(signal.SIGINT)
    _, err = ask.communicate(timeout=120)
    stderr = err.decode()
    assert ask.returncode == 130, stderr
    assert "stopped" in stderr and "skipped the remaining 1 prompt" in stderr and "Traceback" not in stderr
