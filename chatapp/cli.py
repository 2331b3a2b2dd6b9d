"""The `chatapp` command line. Heavy imports (the engine, the UI) happen inside commands."""

from __future__ import annotations

import functools
import inspect
import sys
from collections.abc import Sequence
from difflib import get_close_matches

import typer
from typer.core import TyperGroup

from chatapp.config import exposed_key_warning
from chatapp.errors import INTERRUPTED, ChatappError, InputError, OutputError
from chatapp.format import one_line
from chatapp.private import tighten_install


def reject_undecodable(args: Sequence[str]) -> None:
    """Python hands over argv bytes that are not UTF-8 as lone surrogates; they would fail
    later, deep in the tokenizer or SQLite, as a UnicodeEncodeError traceback."""
    for number, arg in enumerate(args, 1):
        bad = next((ch for ch in arg if "\udc80" <= ch <= "\udcff"), None)
        if bad is not None:
            raise InputError(f"argument {number} is not valid UTF-8 (it holds the byte 0x{ord(bad) - 0xDC00:02x}); "
                             "pass text in UTF-8")


ROOT_OPTIONS = frozenset({"--help", "--version"})
"""The options of `chatapp` itself; any other one is chat's."""


def chat_by_default(args: Sequence[str], commands: Sequence[str] = ()) -> list[str]:
    """`chatapp --model M --session S` is `chatapp chat --model M --session S`, as `ollama run` and
    `llm chat` users expect: arguments that start with an option other than the root's own go to
    chat (its options and their help stay defined once, on chat). Options typed before a command
    (`chatapp -m M ask "hi" -n 5`) go after it: the first of `commands` that follows a value, not
    an option, is moved to the front."""
    args = list(args)
    if args and args[0].startswith("-") and args[0] != "-" and args[0].split("=", 1)[0] not in ROOT_OPTIONS:
        later = next((i for i in range(1, len(args)) if args[i] in commands and not args[i - 1].startswith("-")
                      and args[i - 1] != "--"), None)
        if later is not None:
            return [args[later], *args[:later], *args[later + 1:]]
        return ["chat", *args]
    return args


def peer_habit(typed: str, rest: Sequence[str]) -> tuple[str, list[str]] | None:
    """What Ollama and llm users mean by a first word chatapp has no command for: `run MODEL`
    chats with MODEL (`run MODEL PROMPT`, as `ollama run`, asks once), and a quoted question
    with a space in it (`chatapp "what is a token?"`, as `llm "..."`) is asked. None otherwise."""
    if typed == "run":
        if not rest or rest[0].startswith("-"):
            return "chat", list(rest)
        prompts = [arg for arg in rest[1:] if not arg.startswith("-")]
        return ("ask" if prompts else "chat"), ["--model", rest[0], *rest[1:]]
    if any(ch.isspace() for ch in typed.strip()):
        return "ask", [typed, *rest]
    return None


class UnknownCommand(ChatappError):
    """A mistyped command: a usage slip, not bad input to a command, so its line has no title."""

    def one_line(self) -> str:
        return self.message


def closest_command(typed: str, names: Sequence[str]) -> str | None:
    """The command a user most likely meant: one that `typed` begins, else the nearest spelling."""
    starting = [name for name in names if name.startswith(typed.lower())]
    if len(starting) == 1:
        return starting[0]
    close = get_close_matches(typed.lower(), names, n=1, cutoff=0.5)
    return close[0] if close else None


def joined_help(text: str) -> str:
    """A docstring's paragraphs with each one's line breaks joined, as click does for the first:
    typer 0.29 keeps them in the later paragraphs in rich mode, so at 80 columns a sentence broke
    where the source line ended ("the second" / "half of each full window"). A line that starts a
    list item ("- ", "* ") or an example ("$ ") stays a line of its own."""
    paragraphs = []
    for paragraph in inspect.cleandoc(text).split("\n\n"):
        lines: list[str] = []
        for line in paragraph.split("\n"):
            if lines and not paragraph.startswith("\b") and not line.lstrip().startswith(("- ", "* ", "$ ")):
                lines[-1] = f"{lines[-1].rstrip()} {line.strip()}"
            else:
                lines.append(line)
        paragraphs.append("\n".join(lines))
    return "\n\n".join(paragraphs)


def help_option_without_metavar(get_help_option, ctx):
    option = get_help_option(ctx)
    if option is not None:
        option.metavar = ""
    return option


class ChatappCommands(TyperGroup):
    """A group of commands (chatapp and its models, sessions, ... groups)."""

    def get_help_option(self, ctx):
        """The help option without the `<bool>` typer 0.29 shows after flags, as if they took a value."""
        option = super().get_help_option(ctx)
        if option is not None:
            option.metavar = ""
        return option

    def get_command(self, ctx, cmd_name):
        """The command, its help tidied of two typer 0.29 habits: a group's list of commands keeps
        the docstring's line breaks in rich mode (breaking lines mid-sentence), and a flag shows
        `<bool>` after it, as if it took a value."""
        command = super().get_command(ctx, cmd_name)
        if command is None:
            return None
        if command.help and not command.short_help:
            command.short_help = " ".join(inspect.cleandoc(command.help).split("\n\n")[0].split())
        if command.help:
            command.help = joined_help(command.help)
        for param in command.params:
            if getattr(param, "is_flag", False) and param.metavar is None:
                param.metavar = ""
        if not isinstance(command, ChatappCommands):  # a group has its own get_help_option below
            command.get_help_option = functools.partial(help_option_without_metavar, command.get_help_option)
        return command

    def resolve_command(self, ctx, args):
        """A mistyped command is one line naming it and the closest real one, as git and cargo say
        it (typer's own message was filed under `Input:`, like bad input to a command)."""
        typed = args[0] if args else ""
        if not typed.startswith("-") and not ctx.resilient_parsing and self.get_command(ctx, typed) is None:
            group = ctx.command_path.partition(" ")[2]  # "" for chatapp itself, "sessions" for its group
            meant = peer_habit(typed, args[1:]) if not group else None
            if meant is not None:
                return meant[0], self.get_command(ctx, meant[0]), meant[1]
            names = [name for name, command in self.commands.items() if not command.hidden]
            shown = f"{group} {typed}".strip()
            meant = closest_command(typed, names)
            if meant is not None:
                raise UnknownCommand(f"no such command {shown!r}; did you mean {f'{group} {meant}'.strip()!r}?")
            raise UnknownCommand(f"no such command {shown!r}; the {f'{group} ' if group else ''}commands are: "
                                 f"{', '.join(names)}")
        return super().resolve_command(ctx, args)


class ChatappGroup(ChatappCommands):
    """The root command: every failure ends here as one line on stderr and an exit status
    (0 ok, 1 the work could not be done, 2 bad input), for the real CLI and CliRunner alike."""

    def main(self, args: Sequence[str] | None = None, prog_name: str | None = None,
             complete_var: str | None = None, standalone_mode: bool = True, **extra):
        from chatapp.streams import flush_stdout

        try:
            args = chat_by_default(sys.argv[1:] if args is None else args, list(self.commands))
            reject_undecodable(args)
            result = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
            code = result if isinstance(result, int) else 0
            if code == INTERRUPTED:  # typer 0.29 turns a KeyboardInterrupt into a silent Exit(130)
                code = report("interrupted", INTERRUPTED)
            flush_stdout()
        except typer.TyperException as exc:  # typer's own click: its errors are only public as this base
            if type(exc).__name__ == "NoArgsIsHelpError":  # `chatapp sessions`: the help is the answer
                exc.show()
                code = exc.exit_code
            else:
                code = report(f"Input: {exc.format_message()}", exc.exit_code)
        except typer.Abort:
            code = report("interrupted", INTERRUPTED)
        except OutputError as exc:
            code = exc.exit_code if exc.broken_pipe else report(exc.one_line(), exc.exit_code)
        except ChatappError as exc:
            code = report(exc.one_line(), exc.exit_code)
        except KeyboardInterrupt:
            code = report("interrupted", INTERRUPTED)
        if standalone_mode:
            sys.exit(code)
        return code


def report(message: str, code: int) -> int:
    """Print one clear line on stderr; returns the exit status to use."""
    print(f"chatapp: {one_line(message)}", file=sys.stderr)
    return code


app = typer.Typer(
    name="chatapp",
    cls=ChatappGroup,
    help="Chat with local LLMs in the terminal and watch how inference works.\n\n"
         "Without a command, or with chat's options only (chatapp --model M --session S), it opens the chat. "
         "As in Ollama and llm: chatapp run MODEL opens the chat with MODEL (chatapp run MODEL \"PROMPT\" asks "
         "once), and chatapp \"a question?\" asks it.",
    no_args_is_help=False,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _register_subcommands() -> None:
    from chatapp.commands import bench as bench_cmd
    from chatapp.commands import config as config_cmd
    from chatapp.commands import core, neighbours, next_token
    from chatapp.commands import models as models_cmd
    from chatapp.commands import presets as presets_cmd
    from chatapp.commands import sessions as sessions_cmd
    from chatapp.commands import themes as themes_cmd
    from chatapp.commands import tools as tools_cmd

    core.register(app)
    app.command()(neighbours.neighbours)
    for command in (next_token.perplexity, next_token.lens, next_token.sampler):
        app.command()(command)
    group = ChatappCommands
    app.add_typer(models_cmd.app, name="models", cls=group, help="List, inspect and pull GGUF models.")
    app.add_typer(config_cmd.app, name="config", cls=group, help="Where the config file lives and what it holds.")
    app.add_typer(bench_cmd.app, name="bench", cls=group, help="Measure this machine: memory bandwidth.")
    app.add_typer(themes_cmd.app, name="themes", cls=group)
    app.add_typer(sessions_cmd.app, name="sessions", cls=group)
    app.add_typer(tools_cmd.app, name="tools", cls=group, help="The tools the model may call, and their cost.")
    app.add_typer(presets_cmd.app, name="presets", cls=group)


def start_notices() -> list[str]:
    """What the CLI says, one line each, before a command runs: permissions it tightened, and
    an API key in a config file that others can read."""
    notices = [tighten_install().notice(), exposed_key_warning()]
    return [notice for notice in notices if notice]


def fail(message: str, code: int = 2) -> None:
    """Print one clear line on stderr and exit."""
    raise SystemExit(report(message, code))


def main() -> None:
    from chatapp.streams import guard_standard_streams

    guard_standard_streams()
    _register_subcommands()
    for notice in start_notices():  # files made private, a key others can read
        print(f"chatapp: {notice}", file=sys.stderr)
    app()
