"""Input and output that used to end in a traceback: argv that isn't UTF-8, standard output that
is full, closed or whose reader went away, and session reads on a full disk or a read-only
folder (a real tmpfs and a real read-only bind mount, in a user namespace)."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from chatapp import paths
from tests.cli.seeded_sessions import seed
from tests.cli.namespaces import namespace_run

EXE = Path(sys.executable).with_name("chatapp")
BAD_UTF8 = b"caf\xff\xfe\xc0\x80 au lait"


@pytest.fixture
def env(isolated_dirs):
    return {**os.environ, **isolated_dirs, "COLUMNS": "200"}


def one_error_line(err: str) -> str:
    assert "Traceback" not in err, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


# --- argv that is not UTF-8 -----------------------------------------------------------------------
@pytest.mark.parametrize("args", [
    [b"ask", BAD_UTF8],
    [b"ask", b"--system", BAD_UTF8, b"hi"],
    [b"tokenize", BAD_UTF8],
    [b"ask", b"--session", BAD_UTF8, b"hi"],
])
def test_invalid_utf8_arguments_are_one_input_line(env, args):
    out = subprocess.run([bytes(EXE), *args], capture_output=True, env=env, timeout=120)
    assert out.returncode == 2
    line = one_error_line(out.stderr.decode())
    n = args.index(BAD_UTF8) + 1
    assert line == f"chatapp: Input: argument {n} is not valid UTF-8 (it holds the byte 0xff); pass text in UTF-8"


# --- standard output that can't be written ----------------------------------------------------------
@pytest.mark.parametrize("args", [("sessions", "list"), ("sessions", "export", "work"),
                                  ("sessions", "export", "work", "--format", "json"), ("--version",)])
def test_a_full_stdout_is_one_line_exit_1(env, args):
    seed()
    with open("/dev/full", "w") as full:
        out = subprocess.run([str(EXE), *args], stdout=full, stderr=subprocess.PIPE, text=True, env=env, timeout=120)
    assert out.returncode == 1
    assert one_error_line(out.stderr) == "chatapp: Output: cannot write to standard output (No space left on device)"


def test_a_reply_to_a_full_stdout_is_still_saved(env):
    with open("/dev/full", "w") as full:
        out = subprocess.run([str(EXE), "ask", "--session", "s", "Name a colour.", "--temperature", "0",
                              "--max-tokens", "8", "--ctx", "512"], stdout=full, stderr=subprocess.PIPE, text=True,
                             env=env, timeout=300)
    assert out.returncode == 1 and "Traceback" not in out.stderr
    assert out.stderr.strip().splitlines()[-1] == ("chatapp: Output: cannot write to standard output "
                                                   "(No space left on device)")
    from chatapp.engine.sessions.store import SessionStore

    saved = SessionStore.open(paths.sessions_dir(), create=False).get("s").messages
    assert [m.role for m in saved] == ["system", "user", "assistant"] and saved[-1].content


@pytest.mark.parametrize("args", [("sessions", "list"), ("sessions", "export", "work"), ("--version",)])
def test_a_reader_that_went_away_ends_quietly(env, args):
    """`chatapp sessions list | head -1` where head has already exited: no traceback, no message."""
    seed()
    read, write = os.pipe()
    os.close(read)  # the reader is gone before anything is written
    try:
        out = subprocess.run([str(EXE), *args], stdout=write, stderr=subprocess.PIPE, text=True, env=env,
                             timeout=120)
    finally:
        os.close(write)
    assert out.returncode == 1 and out.stderr == ""


def test_head_1_takes_the_first_line_and_chatapp_exits_quietly(env):
    seed()
    out = subprocess.run(f"set -o pipefail; {shlex.quote(str(EXE))} sessions export work | head -1",
                         shell=True, executable="/bin/bash", capture_output=True, text=True, env=env, timeout=120)
    assert out.stdout == "# Session work\n" and out.stderr == ""
    # With pipefail the status is chatapp's (head's is 0). The export is one write that the pipe
    # takes whole before head can read it, so chatapp never meets the closed pipe: 0. Had head left
    # first, it would be a quiet 1 (OutputError's), as test_a_reader_that_went_away_ends_quietly pins.
    assert out.returncode == 0


def test_a_closed_stdout_is_not_a_silent_success(env):
    seed()
    closed = lambda: os.close(1)  # noqa: E731 - `chatapp sessions export work >&-`
    out = subprocess.run([str(EXE), "sessions", "export", "work"], stderr=subprocess.PIPE, text=True, env=env,
                         preexec_fn=closed, timeout=120)
    assert out.returncode == 1
    assert one_error_line(out.stderr) == "chatapp: Output: cannot write to standard output (it is closed)"
    # A command that prints nothing on stdout still works with it closed.
    out = subprocess.run([str(EXE), "sessions", "rm", "work"], stderr=subprocess.PIPE, text=True, env=env,
                         preexec_fn=closed, timeout=120)
    assert out.returncode == 0 and out.stderr.strip() == "removed session work"


# --- reading sessions on a full disk and in a read-only folder -----------------------------------------

def commands_script(results: Path, commands: list[str]) -> str:
    """Run each chatapp command, keeping its stdout, stderr and exit status in `results`."""
    exe = shlex.quote(str(EXE))
    lines = []
    for n, command in enumerate(commands):
        base = shlex.quote(str(results / str(n)))
        lines.append(f"{exe} {command} > {base}.out 2> {base}.err && echo 0 > {base}.rc || echo $? > {base}.rc")
    return "\n".join(lines)


def result(results: Path, n: int) -> tuple[int, str, str]:
    return (int((results / f"{n}.rc").read_text()), (results / f"{n}.out").read_text(),
            (results / f"{n}.err").read_text())


READS = ["sessions list", "sessions show work", "sessions export work --format json"]
TURNS = ["ask -n 2 --threads 1 --session work 'Once more.'", "ask -n 2 --threads 1 'A new chat here.'"]
"""A turn's save where nothing can be written: going on with a session is refused before the turn
(nothing is lost: the question is the user's still), and a new chat is answered and said not kept."""


def check_turns(results: Path, first: int, cause: str) -> None:
    rc, stdout, stderr = result(results, first)
    assert rc == 2 and stdout == "" and cause in one_error_line(stderr), stderr
    rc, stdout, stderr = result(results, first + 1)
    assert rc == 0 and stdout.strip() and "Traceback" not in stderr, stderr
    assert any(line.startswith("sessions: this chat is not kept: ") and cause in line for line in stderr.splitlines())


def test_reads_work_on_a_full_disk_and_a_write_names_the_cause(env, tmp_path):
    seed()
    sessions = paths.sessions_dir()
    results = tmp_path / "results"
    results.mkdir()
    copy = tmp_path / "copy"
    shutil.copytree(sessions, copy)
    script = f"""
umask 077
mount -t tmpfs -o size=1m tmpfs {shlex.quote(str(sessions))}
cp -a {shlex.quote(str(copy))}/. {shlex.quote(str(sessions))}/
dd if=/dev/zero of={shlex.quote(str(sessions / 'fill'))} bs=4k 2>/dev/null || true
{commands_script(results, READS + ['sessions rename work other'] + TURNS)}
rm {shlex.quote(str(sessions / 'fill'))}
{commands_script(results / 'after', ['sessions show work'])}
"""
    (results / "after").mkdir()
    out = namespace_run(script, env)
    assert out.returncode == 0, out.stderr
    for n in range(len(READS)):
        rc, stdout, stderr = result(results, n)
        assert rc == 0 and stderr == "", (READS[n], stderr)
        assert "work" in stdout
    rc, _, stderr = result(results, len(READS))
    assert rc == 2 and "Traceback" not in stderr and len(stderr.strip().splitlines()) == 1
    assert f"(the disk holding {sessions} is full" in stderr
    check_turns(results, len(READS) + 1, f"the disk holding {sessions} is full")
    rc, stdout, _ = result(results / "after", 0)  # the database came through whole
    assert rc == 0 and "work" in stdout


def test_reads_work_in_a_read_only_folder_and_a_write_names_the_cause(env, tmp_path):
    seed()
    sessions = shlex.quote(str(paths.sessions_dir()))
    results = tmp_path / "results"
    results.mkdir()
    script = f"""
mount --bind {sessions} {sessions}
mount -o remount,bind,ro {sessions}
{commands_script(results, READS + ['sessions rm work'] + TURNS)}
"""
    out = namespace_run(script, env)
    assert out.returncode == 0, out.stderr
    for n in range(len(READS)):
        rc, stdout, stderr = result(results, n)
        assert rc == 0 and stderr == "", (READS[n], stderr)
        assert "work" in stdout
    rc, _, stderr = result(results, len(READS))
    assert rc == 2 and "Traceback" not in stderr and len(stderr.strip().splitlines()) == 1
    assert f"({paths.sessions_dir()} is on a read-only file system)" in stderr
    check_turns(results, len(READS) + 1, f"{paths.sessions_dir()} is on a read-only file system")
