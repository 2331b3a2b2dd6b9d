"""The command line as users of llm, ollama and llama-cli expect it, through the real chatapp:
a question piped on stdin, llama-cli's short options, every option's help and default, a tree
that indents only at forks, `models list` readable in a pipe at 80 columns, and a mistyped
command named in one line with the closest real one."""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
from pathlib import Path

import pytest
from tests.cli.one_line import one_line

EXE = Path(sys.executable).with_name("chatapp")


@pytest.fixture
def run(isolated_dirs):
    """The installed chatapp with `stdin` (text, or a file object such as a pty) and `columns`."""

    def run(*args: str, stdin=None, columns: int = 200, env: dict[str, str] | None = None,
            timeout: float = 300) -> subprocess.CompletedProcess[str]:
        full = {**os.environ, **isolated_dirs, "COLUMNS": str(columns), **(env or {})}
        if stdin is None:
            kwargs = {"stdin": subprocess.DEVNULL}
        elif isinstance(stdin, str):
            kwargs = {"input": stdin}
        else:
            kwargs = {"stdin": stdin}
        return subprocess.run([str(EXE), *args], capture_output=True, text=True, env=full, timeout=timeout,
                              **kwargs)

    return run


# --- a mistyped command --------------------------------------------------------------------------
@pytest.mark.parametrize(("args", "expected"), [
    (("askk", "hi"), "chatapp: no such command 'askk'; did you mean 'ask'?"),
    (("sessions", "lst"), "chatapp: no such command 'sessions lst'; did you mean 'sessions list'?"),
    (("tok", "x"), "chatapp: no such command 'tok'; did you mean 'tokenize'?"),
    (("models", "pul"), "chatapp: no such command 'models pul'; did you mean 'models pull'?"),
    (("frobnicate",), "chatapp: no such command 'frobnicate'; the commands are: chat, ask, tokenize, neighbours, "
                      "perplexity, lens, sampler, models, config, bench, themes, sessions, tools, presets"),
])
def test_a_mistyped_command_is_one_line_naming_the_closest_real_one(run, args, expected):
    out = run(*args)
    assert out.returncode == 2 and one_line(out) == expected and out.stdout == ""


def test_a_group_lists_its_commands_without_breaking_lines_mid_sentence(run):
    out = run("sessions", "--help", columns=80)
    assert out.returncode == 0, out.stderr
    assert "is cut at 20,000 characters; export has all of it" in out.stdout, out.stdout
    assert "the environment or a default" in run("config", "--help", columns=80).stdout


# --- a question piped on stdin -------------------------------------------------------------------
SHORT = ("--json", "-n", "4", "-c", "512", "--temp", "0", "-ngl", "0", "--threads", "1")
LONG = ("--json", "--max-tokens", "4", "--ctx", "512", "--temperature", "0", "--gpu-layers", "0", "--threads", "1")


def record(out: subprocess.CompletedProcess) -> dict:
    assert out.returncode == 0 and "Traceback" not in out.stderr, out.stderr
    [line] = out.stdout.splitlines()
    return json.loads(line)


def user_turns(run, session: str) -> list[str]:
    out = run("sessions", "export", session, "--format", "json")
    assert out.returncode == 0, out.stderr
    return [m["content"] for m in json.loads(out.stdout)["messages"] if m["role"] == "user"]


def test_a_question_piped_on_stdin_is_asked_and_llama_cli_short_options_are_the_long_ones(run):
    piped = record(run("ask", *SHORT, "--session", "p", stdin="What is the capital of France?\n"))
    typed = record(run("ask", *LONG, "What is the capital of France?"))
    assert piped["reply"] == typed["reply"] and piped["prompt_tokens"] == typed["prompt_tokens"]
    assert piped["n_ctx"] == 512 and piped["decode_tokens"] <= 4
    assert user_turns(run, "p") == ["What is the capital of France?"]


def test_piped_text_goes_before_the_first_question_as_llm_puts_it(run):
    code = "def double(x):\n    return x * 2\n"
    record_ = run("ask", *LONG, "--session", "c", "What does this do?", "And its name?", stdin=code)
    assert record_.returncode == 0, record_.stderr
    assert user_turns(run, "c") == [code.rstrip() + "\n\nWhat does this do?", "And its name?"]


def session_names(run) -> list[str]:
    out = run("sessions", "list", "--json")
    assert out.returncode == 0, out.stderr
    return sorted(s["name"] for s in json.loads(out.stdout)["sessions"])


def test_every_ask_is_kept_and_continue_goes_on_with_the_session_used_last_as_llm_c_does(run):
    nothing = run("ask", *LONG, "--continue", "Hello?")
    assert nothing.returncode == 2 and one_line(nothing) == (
        "chatapp: Input: --continue: there is no saved session yet (every chat, in the TUI or by ask, is kept as "
        "one unless incognito)")
    record(run("ask", *LONG, "--session", "older", "What is 2 plus 2?"))
    assert record(run("ask", *LONG, "Name a colour."))["session"] == "Name a colour"
    went_on = run("ask", *LONG, "--continue", "And another one?")
    continued = record(went_on)
    assert continued["session"] == "Name a colour" and "continuing session 'Name a colour'" in went_on.stderr
    assert continued["cached_tokens"] > 0  # resumed with the session's KV state, not prefilled again
    assert user_turns(run, "Name a colour") == ["Name a colour.", "And another one?"]
    assert user_turns(run, "older") == ["What is 2 plus 2?"]
    again = run("ask", "-n", "4", "--threads", "1", "Name a colour.")  # a name in use: numbered, as in the TUI
    assert again.returncode == 0 and "kept as session 'Name a colour 2'" in again.stderr, again.stderr
    assert "session" not in record(run("ask", *LONG, "--incognito", "Name a fruit."))
    assert session_names(run) == ["Name a colour", "Name a colour 2", "older"]
    both = run("ask", *LONG, "--continue", "--session", "older", "Hello?")
    assert both.returncode == 2 and one_line(both) == (
        "chatapp: Input: --continue and --session both name a session: give one of them")


def test_an_ask_whose_sessions_cannot_be_opened_is_answered_and_says_it_is_not_kept(run, isolated_dirs):
    database = Path(isolated_dirs["XDG_DATA_HOME"]) / "chatapp" / "sessions" / "sessions.db"
    database.parent.mkdir(parents=True)
    database.write_bytes(b"not a database, " * 64)
    out = run("ask", *LONG, "Name a colour.")
    assert "session" not in record(out)
    assert "sessions: this chat is not kept:" in out.stderr and "Traceback" not in out.stderr
    assert database.read_bytes() == b"not a database, " * 64  # what was there is left as it was


@pytest.mark.parametrize(("data", "expected"), [
    (b"", "chatapp: Input: Missing argument 'prompts': give a question, or pipe one on stdin (it was empty)"),
    (b" \n\t\n", "chatapp: Input: Missing argument 'prompts': give a question, or pipe one on stdin (it was empty)"),
    (b"caf\xe9?", "chatapp: Input: stdin is not valid UTF-8 (byte 3 is 0xe9); pipe text in UTF-8"),
    (b"a\0b", "chatapp: Input: stdin holds a NUL byte (at character 1): pipe text, not binary data"),
])
def test_a_piped_stdin_that_holds_no_question_is_one_line_exit_2(run, tmp_path, data, expected):
    path = tmp_path / "stdin"
    path.write_bytes(data)
    with path.open("rb") as stdin:  # `chatapp ask < file`, as a shell redirects it
        out = run("ask", *LONG, stdin=stdin)
    assert out.returncode == 2 and one_line(out) == expected and out.stdout == ""


def test_a_terminal_on_stdin_without_a_question_is_still_the_missing_argument_error(run):
    main, side = pty.openpty()
    try:
        with os.fdopen(side, "rb", buffering=0, closefd=False) as stdin:
            out = run("ask", *LONG, stdin=stdin, timeout=60)  # never waits for typing
    finally:
        os.close(side)
        os.close(main)
    assert out.returncode == 2 and one_line(out) == "chatapp: Input: Missing argument 'prompts'."


# --- help: every option says what it does and, where it has one, its default -----------------------
def option_blocks(help_text: str) -> dict[str, str]:
    """Each option's rows of a rich help page, joined: {"--max-tokens": "--max-tokens -n <int> The ..."}."""
    blocks: dict[str, str] = {}
    current = None
    for line in help_text.splitlines():
        cell = line.strip().strip("│").strip()
        if cell.startswith("-"):
            current = cell.split()[0].split(",")[0]
            blocks[current] = cell
        elif current is not None and cell and not line.lstrip().startswith(("╰", "╭")):
            blocks[current] += " " + cell
        elif line.lstrip().startswith("╰"):
            current = None
    return blocks


def described(block: str) -> str:
    """An option's help text alone: without its names, its metavar and its default."""
    words = [w for w in block.split() if not w.startswith(("-", "<"))]
    return " ".join(words).split("[default:")[0].strip()


def settings_backed(command) -> set[str]:
    """The options of `command` that, left out, take a config setting with a value of its own."""
    from dataclasses import fields

    from chatapp.config import Settings

    defaults = {f.name: getattr(Settings(), f.name) for f in fields(Settings)}
    defaults["system"] = defaults["system_prompt"]
    return {param.opts[0] for param in command.params
            if getattr(param, "is_flag", False) is False and param.param_type_name == "option"
            and defaults.get(param.name) not in (None, "")}


@pytest.mark.parametrize("name", ["ask", "chat"])
def test_every_option_has_help_and_shows_its_default(run, name):
    import typer

    from tests.cli.conftest import _cli_app

    command = typer.main.get_command(_cli_app()).commands[name]
    out = run(name, "--help", columns=250)
    assert out.returncode == 0, out.stderr
    blocks = option_blocks(out.stdout)
    options = {param.opts[0] for param in command.params if param.param_type_name == "option"}
    assert options <= set(blocks), (options - set(blocks), out.stdout)
    for option in options:
        assert described(blocks[option]), f"{option} has no help: {blocks[option]!r}"
    backed = settings_backed(command)
    assert {"--model", "--ctx", "--system"} <= backed and (name == "chat" or {
        "--max-tokens", "--temperature", "--seed", "--threads", "--gpu-layers", "--kv-type"} <= backed)
    for option in backed | ({"--logprobs"} if name == "ask" else set()):
        assert "[default: " in blocks[option], f"{option} shows no default: {blocks[option]!r}"
    assert blocks["--ctx"].split()[:2] == ["--ctx", "-c"]
    if name == "ask":
        for long, short in (("--max-tokens", "-n"), ("--gpu-layers", "-ngl"), ("--temperature", "--temp")):
            assert short in blocks[long].split()[0].split(",") + blocks[long].split()[1:2], blocks[long]
        assert "[default: 512, or max_tokens in the config]" in blocks["--max-tokens"]
        assert "stdin" in out.stdout.split("Options")[0]  # the PROMPTS argument says how piped text is read


# --- sessions tree: indented at forks only -------------------------------------------------------
def save(name: str, messages: list, leaf: str | None = None) -> None:
    from chatapp import paths
    from chatapp.engine.events import Message
    from chatapp.engine.sessions.store import ModelIdentity, SessionStore, Snapshot

    tree = [Message("system", "Be brief.")] + [Message(role, text, id=id_, parent=parent)
                                               for id_, parent, role, text in messages]
    SessionStore.open(paths.sessions_dir()).save(
        Snapshot(name, ModelIdentity("m", "/m.gguf", "ab" * 32, "Q4_1"), tree, 1, 0, leaf=leaf))


def test_a_40_message_chat_is_drawn_at_one_level_within_80_columns(run):
    from rich.cells import cell_len

    messages, parent = [], None
    for n in range(40):
        role = ("user", "assistant")[n % 2]
        messages.append((f"{n:08x}", parent, role, f"Message {n}: a sentence long enough to need more room "
                                                   f"than the 80 columns of a terminal leave for it."))
        parent = f"{n:08x}"
    save("long", messages)
    out = run("sessions", "tree", "long", columns=80)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert max(cell_len(line) for line in lines) <= 80, out.stdout
    rows = [line for line in lines if line.startswith("* ")]
    assert len(rows) == 40 and all(row.startswith(f"* {n:08x} ") for n, row in enumerate(rows)), out.stdout
    assert rows[0].endswith("…") and "Message 0: a sentence" in rows[0]


def test_a_fork_opens_one_level_per_branch_as_the_tui_tree_does(run):
    save("t", [
        ("a0000001", None, "user", "Name a fruit."), ("a0000002", "a0000001", "assistant", "Apple."),
        ("a0000003", "a0000002", "user", "Name a colour."), ("a0000004", "a0000003", "assistant", "Red."),
        ("a0000005", "a0000002", "user", "Name a planet."), ("a0000006", "a0000005", "assistant", "Mars."),
        ("a0000007", "a0000005", "assistant", "Venus."), ("a0000008", "a0000007", "user", "Why?"),
        ("a0000009", "a0000008", "assistant", "Hot."),
    ], leaf="a0000009")
    out = run("sessions", "tree", "t", columns=80)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[2:] == [
        "* a0000001 user      Name a fruit.",
        "* a0000002 assistant Apple. (2 branches)",
        "  branch 1/2",
        "    a0000003 user      Name a colour.",
        "    a0000004 assistant Red.",
        "* branch 2/2",
        "*   a0000005 user      Name a planet. (2 branches)",
        "    branch 1/2",
        "      a0000006 assistant Mars.",
        "*   branch 2/2",
        "*     a0000007 assistant Venus.",
        "*     a0000008 user      Why?",
        "*     a0000009 assistant Hot.",
    ], out.stdout


# --- models list in a pipe at 80 columns ---------------------------------------------------------
def test_models_list_in_a_pipe_at_80_columns_keeps_every_column_whole(run, tmp_path, default_model_path):
    from rich.cells import cell_len

    from tests.engine.models.stores import HF_NAME, LMSTUDIO_NAME, OLLAMA_NAME, build

    stores = build(tmp_path / "stores", default_model_path)
    out = run("models", "list", columns=80, env={**stores.env(), "HF_HUB_OFFLINE": "1"})
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert max(cell_len(line) for line in lines) <= 80, out.stdout
    rows = [[cell.strip() for cell in line.strip("│").split("│")] for line in lines if line.startswith("│")]
    found = [row for row in rows if row[1] == "Q4_1" and row[3] == "134.5M"]
    assert len(found) == 3 and all(row[2] == "93.8 MiB" and row[4] == "yes" for row in found), out.stdout
    names = "".join(row[0] for row in rows)  # a long name folds onto the rows below its own
    assert all(name in names for name in (HF_NAME, OLLAMA_NAME, LMSTUDIO_NAME)), out.stdout
    assert "…" not in out.stdout


def command_paths() -> list[tuple[str, ...]]:
    import typer

    from tests.cli.conftest import _cli_app

    def walk(command, path):
        yield path
        for name, sub in getattr(command, "commands", {}).items():
            yield from walk(sub, (*path, name))

    return list(walk(typer.main.get_command(_cli_app()), ()))


@pytest.mark.parametrize("path", command_paths(), ids=lambda path: " ".join(path) or "chatapp")
def test_every_command_s_options_have_help_and_no_flag_reads_as_taking_a_value(invoke, path):
    out = invoke(*path, "--help", env={"COLUMNS": "250"})
    assert out.exit_code == 0, out.output
    assert "<bool>" not in out.output, out.output
    for option, block in option_blocks(out.output).items():
        assert described(block), f"{' '.join(path)} {option} has no help: {block!r}"
