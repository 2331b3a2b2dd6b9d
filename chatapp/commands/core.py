"""chat, ask, tokenize and --version: the commands that load a model.

chatapp.cli registers these on its typer app (`register`), so this layer never imports it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console
from rich.text import Text

from chatapp.commands.opening import open_engine, settings_with
from chatapp.config import DRAFT_MODES
from chatapp.engine.sampling import MAX_LOGPROBS, check_logprobs
from chatapp.errors import InputError

FLAG = ""
"""The metavar of an on/off option: typer 0.29's help shows `<bool>` after a flag without one,
as if it took a value."""
ModelOpt = Annotated[Optional[str], typer.Option("--model", "-m", help="A GGUF path or a catalog name.")]
CtxOpt = Annotated[Optional[int], typer.Option("--ctx", help="Context window in tokens.")]
LongCtxOpt = Annotated[bool, typer.Option("--allow-long-ctx", metavar=FLAG,
                                          help="Allow --ctx above the model's training context.")]
SystemOpt = Annotated[Optional[str], typer.Option(
    "--system", help="System prompt; on a saved session, it replaces the session's from this turn on.")]
ServerOpt = Annotated[Optional[str], typer.Option(
    "--server", help="Chat through the llama-server at this URL (also $CHATAPP_SERVER or `server` in the config).")]
DraftOpt = Annotated[Optional[str], typer.Option(
    "--draft", help=f"Speculative decoding: {' or '.join(DRAFT_MODES)} (ngram drafts by prompt lookup and "
                    "verifies the drafts in one batch; the replies stay the same).")]
DraftMaxOpt = Annotated[Optional[int], typer.Option(
    "--draft-max", help="The most draft tokens one decode step verifies (1 to 64).")]
ApiKeyOpt = Annotated[Optional[str], typer.Option(
    "--api-key", help="The key of a llama-server started with --api-key (also $CHATAPP_API_KEY).", show_default=False)]


def _version(value: bool) -> None:
    if not value:
        return
    from chatapp import __version__
    from chatapp.engine.opening import local_versions

    found = local_versions()
    print(f"chatapp {__version__}")
    print(f"llama-cpp-python {found['llama-cpp-python']}")
    print(f"llama.cpp {found['llama.cpp']}")
    raise typer.Exit()


def root(
    ctx: typer.Context,
    version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True, metavar=FLAG,
                                          help="Print chatapp, llama-cpp-python and llama.cpp versions.")] = False,
) -> None:
    """Chat with a local model in the terminal and watch how inference works."""
    if ctx.invoked_subcommand is None:
        chat(model=None, theme=None, n_ctx=None, session=None, system=None, allow_long_ctx=False, server=None,
             api_key=None, draft=None, draft_max=None)


def chat(
    model: ModelOpt = None,
    theme: Annotated[Optional[str], typer.Option("--theme", help="Theme name (see chatapp themes list).")] = None,
    n_ctx: CtxOpt = None,
    session: Annotated[Optional[str], typer.Option("--session", help="Open or create a saved session.")] = None,
    system: SystemOpt = None,
    allow_long_ctx: LongCtxOpt = False,
    server: ServerOpt = None,
    api_key: ApiKeyOpt = None,
    draft: DraftOpt = None,
    draft_max: DraftMaxOpt = None,
) -> None:
    """Open the chat TUI."""
    from chatapp.commands.tui import run_app

    settings = settings_with(theme=theme, n_ctx=n_ctx, system_prompt=system, allow_long_ctx=allow_long_ctx or None,
                             server=server, api_key=api_key, draft=draft, draft_max=draft_max)
    run_app(settings, model=model, session=session, system=system)


def ask(
    prompts: Annotated[list[str], typer.Argument(help="One user turn each, in order, in one conversation.")],
    model: ModelOpt = None,
    system: SystemOpt = None,
    max_tokens: Annotated[Optional[int], typer.Option("--max-tokens")] = None,
    temperature: Annotated[Optional[float], typer.Option(
        "--temperature", help="0 is greedy; repeatable with a fixed --threads.")] = None,
    seed: Annotated[Optional[int], typer.Option("--seed")] = None,
    n_ctx: CtxOpt = None,
    kv_type: Annotated[Optional[str], typer.Option("--kv-type", help="f16, q8_0 or q4_0.")] = None,
    threads: Annotated[Optional[int], typer.Option("--threads")] = None,
    gpu_layers: Annotated[Optional[int], typer.Option("--gpu-layers")] = None,
    as_json: Annotated[bool, typer.Option("--json", metavar=FLAG, help="One JSON object per turn per line.")] = False,
    session: Annotated[Optional[str], typer.Option("--session", help="Create or continue a saved session.")] = None,
    allow_long_ctx: LongCtxOpt = False,
    server: ServerOpt = None,
    api_key: ApiKeyOpt = None,
    attach: Annotated[Optional[list[Path]], typer.Option(
        "--attach", help="A file or folder (text, Markdown, code, PDF) to answer from; repeatable.")] = None,
    draft: DraftOpt = None,
    draft_max: DraftMaxOpt = None,
    branch_from: Annotated[Optional[str], typer.Option(
        "--branch-from", help="With --session: the first prompt becomes a new question after this reply's id "
                              "(see chatapp sessions tree; 'root' for a new first question), and the run "
                              "continues on that branch.")] = None,
    logprobs: Annotated[int, typer.Option(
        "--logprobs", help=f"With --json: each reply token's probability, rank and entropy, and its top N "
                           f"alternatives before and after the sampler chain (0 to {MAX_LOGPROBS}).")] = 0,
    at_token: Annotated[Optional[int], typer.Option(
        "--at-token", help="With --branch-from REPLY and --token: keep the reply's first K tokens, put --token "
                           "in place of the next one, and decode on from there (a new sibling reply).")] = None,
    token: Annotated[Optional[int], typer.Option("--token", help="The token id that replaces token K "
                                                                 "(see --json --logprobs N).")] = None,
) -> None:
    """Ask one or more questions in one conversation; print replies and per-turn stats."""
    if not prompts or any(not p.strip() for p in prompts):
        raise InputError("the prompt is empty")
    if branch_from is not None and session is None:
        raise InputError("--branch-from needs --session: it names a message of a saved session")
    if (at_token is None) != (token is None) or (at_token is not None and branch_from is None):
        raise InputError("--at-token and --token go together, with --branch-from REPLY")
    if at_token is not None and len(prompts) != 1:
        raise InputError("a branch from a token continues the reply itself: give one placeholder prompt, e.g. -")
    check_logprobs(logprobs)
    from chatapp.engine.retrieval.loading import load_paths

    loaded = load_paths(list(attach or ()))  # a bad file fails here, before the model loads
    settings = settings_with(system_prompt=system, max_tokens=max_tokens, temperature=temperature, seed=seed,
                             n_ctx=n_ctx, kv_type=kv_type, threads=threads, gpu_layers=gpu_layers,
                             allow_long_ctx=allow_long_ctx or None, server=server, api_key=api_key,
                             draft=draft, draft_max=draft_max)
    from chatapp.commands.ask_output import run_ask

    run_ask(settings, model, prompts, as_json=as_json, session=session, attachments=loaded, system=system,
            branch_from=branch_from, logprobs=logprobs, at_token=(at_token, token) if at_token is not None else None)


def tokenize(
    text: Annotated[str, typer.Argument(help="Text to cut into tokens with the model's tokenizer.")],
    model: ModelOpt = None,
    as_json: Annotated[bool, typer.Option("--json", metavar=FLAG,
                                          help='A list of {"id", "piece", "special"}.')] = False,
) -> None:
    """Show how the model's own tokenizer cuts TEXT into tokens."""
    if not text:
        raise InputError("the text is empty")
    engine = open_engine(settings_with(n_ctx=256), model)
    tokens = engine.tokenize(text)
    if as_json:
        print(json.dumps([t.to_json() for t in tokens], ensure_ascii=False))
        return
    out = Console()
    styles = ("black on cyan", "black on yellow")
    line = Text()
    for i, token in enumerate(tokens):
        style = "bold white on magenta" if token.special else styles[i % 2]
        # An empty piece is a token holding part of a character the next token completes.
        line.append(token.piece.replace("\n", "↵\n") or "⋯", style=style)
    out.print(line)
    noun = "token" if len(tokens) == 1 else "tokens"
    out.print(f"[bold]{len(tokens)}[/] {noun} · ids: {' '.join(str(t.id) for t in tokens)}", highlight=False)


def register(app: typer.Typer) -> None:
    """Put the root callback (--version, bare `chatapp`) and chat, ask, tokenize on `app`."""
    app.callback(invoke_without_command=True)(root)
    for command in (chat, ask, tokenize):
        app.command()(command)
