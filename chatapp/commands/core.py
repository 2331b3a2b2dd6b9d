"""chat, ask, tokenize and --version: the commands that load a model.

chatapp.cli registers these on its typer app (`register`), so this layer never imports it.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.markup import escape
from rich.text import Text

from chatapp.commands.opening import open_engine, session_to_open, settings_with, settings_with_preset
from chatapp.commands.terminal import SafeConsole
from chatapp.config import DRAFT_MODES, Settings
from chatapp.engine.sampling import MAX_LOGPROBS, check_logprobs
from chatapp.errors import InputError
from chatapp.format import strict_json, visible_text

FLAG = ""
"""The metavar of an on/off option: typer 0.29's help shows `<bool>` after a flag without one,
as if it took a value."""
BUILT_IN = Settings()


def configured(key: str, shown: str | None = None) -> str:
    """The `[default: ...]` that ends the help of an option taken from the config file when it is
    left out: chatapp's own value (`shown`, where the bare value needs words), or the config's `key`."""
    return default_note(f"{getattr(BUILT_IN, key) if shown is None else shown}, or {key} in the config")


def default_note(text: str) -> str:
    """`[default: TEXT]` for the end of an option's help, as typer writes a plain default (its
    `show_default` text comes out in parentheses), kept out of rich markup."""
    return escape(f" [default: {text}]")


ModelOpt = Annotated[Optional[str], typer.Option(
    "--model", "-m", help="A GGUF path, a catalog name, or a model in another tool's store: "
                          "hf:ORG/REPO[:QUANT], ollama:NAME[:TAG] (or NAME:TAG), lmstudio:PUBLISHER/REPO "
                          "(chatapp models list names them all)."
                          + default_note(f"$CHATAPP_MODEL, else model in the config, else {BUILT_IN.model}"))]
MmprojOpt = Annotated[Optional[Path], typer.Option(
    "--mmproj", help="The vision model's projector (an mmproj GGUF) to read images with."
                     + configured("mmproj", "the mmproj-*.gguf beside the model"))]
CtxOpt = Annotated[Optional[int], typer.Option(
    "--ctx", "-c", help="Context window in tokens." + configured("n_ctx"))]
LongCtxOpt = Annotated[bool, typer.Option("--allow-long-ctx", metavar=FLAG,
                                          help="Allow --ctx above the model's training context "
                                               "(also allow_long_ctx in the config).")]
SystemOpt = Annotated[Optional[str], typer.Option(
    "--system", help="System prompt; on a saved session, it replaces the session's from this turn on."
                     + configured("system_prompt", repr(BUILT_IN.system_prompt)))]
ServerOpt = Annotated[Optional[str], typer.Option(
    "--server", help="Chat through the llama-server at this URL (also $CHATAPP_SERVER or `server` in the config).")]
DraftOpt = Annotated[Optional[str], typer.Option(
    "--draft", help=f"Speculative decoding: {' or '.join(DRAFT_MODES)} (ngram drafts by prompt lookup and "
                    "verifies the drafts in one batch; the replies stay the same)." + configured("draft"))]
ContinueOpt = Annotated[bool, typer.Option(
    "--continue", metavar=FLAG, help="Continue the session used last (sessions list's first; every chat, an "
                                     "ask's too, is kept as one), as llm -c does. -c is the context size, as in "
                                     "llama-cli.")]
DraftMaxOpt = Annotated[Optional[int], typer.Option(
    "--draft-max", help="The most draft tokens one decode step verifies (1 to 64)." + configured("draft_max"))]
ThinkBudgetOpt = Annotated[Optional[int], typer.Option(
    "--think-budget", help="A thinking model's most thought tokens per reply; then its closing marker is forced "
                           "and it answers (-1: no budget)." + configured("think_budget", "-1"))]
ThinkMessageOpt = Annotated[Optional[str], typer.Option(
    "--think-budget-message", help="Text forced into a thought before its close when the budget runs out, as "
                                   "llama-server's --reasoning-budget-message."
                                   + configured("think_budget_message", "none"))]
ThinkingHistoryOpt = Annotated[Optional[str], typer.Option(
    "--thinking-history", help="Earlier thoughts in the prompt: template (as the model's template renders "
                               "them, usually dropped) or keep (as generated, so the cache is reused)."
                               + configured("thinking_history"))]
PresetOpt = Annotated[Optional[str], typer.Option(
    "--preset", help="Use this preset's settings (see chatapp presets list); options given here hold over it."
                     + default_note("the preset whose model is this model, else none"))]
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
             api_key=None, draft=None, draft_max=None, continue_latest=False, preset=None)


def chat(
    model: ModelOpt = None,
    theme: Annotated[Optional[str], typer.Option(
        "--theme", help="Theme name (see chatapp themes list)." + configured("theme"))] = None,
    n_ctx: CtxOpt = None,
    session: Annotated[Optional[str], typer.Option("--session", help="Open or create a saved session.")] = None,
    continue_latest: ContinueOpt = False,
    system: SystemOpt = None,
    allow_long_ctx: LongCtxOpt = False,
    server: ServerOpt = None,
    api_key: ApiKeyOpt = None,
    draft: DraftOpt = None,
    draft_max: DraftMaxOpt = None,
    incognito: Annotated[bool, typer.Option(
        "--incognito", help="Keep this chat nowhere: it is saved only if you save it as a session (F6). "
                            "Without it, every chat is kept as a session named after its first question."
                            + configured("incognito"))] = False,
    preset: PresetOpt = None,
    mmproj: MmprojOpt = None,
) -> None:
    """Open the chat TUI."""
    from chatapp.commands.tui import run_app

    session = session_to_open(session, continue_latest)
    if mmproj is not None and not mmproj.is_file():
        raise InputError(f"no projector file at {mmproj}")
    settings, chosen = settings_with_preset(
        preset, model, session, theme=theme, n_ctx=n_ctx, system_prompt=system, allow_long_ctx=allow_long_ctx or None,
        server=server, api_key=api_key, draft=draft, draft_max=draft_max, incognito=incognito or None,
        mmproj=str(mmproj) if mmproj else None)
    run_app(settings, model=model, session=session, system=system, preset=chosen.name if chosen else None)


def ask(
    prompts: Annotated[Optional[list[str]], typer.Argument(
        help="One user turn each, in order, in one conversation. Text piped on stdin is read too, as llm "
             "reads it: alone it is the question; with PROMPTS it goes before the first one, a blank line "
             "between (`cat notes.md | chatapp ask 'Summarize.'`).", show_default=False)] = None,
    model: ModelOpt = None,
    system: SystemOpt = None,
    max_tokens: Annotated[Optional[int], typer.Option(
        "--max-tokens", "-n", help="The most tokens one reply may have." + configured("max_tokens"))] = None,
    temperature: Annotated[Optional[float], typer.Option(
        "--temperature", "--temp", help="0 is greedy; repeatable with a fixed --threads."
                                        + configured("temperature"))] = None,
    seed: Annotated[Optional[int], typer.Option(
        "--seed", help="The sampler's seed: the same seed, prompt and --threads give the same reply."
                       + configured("seed", "-1 (random)"))] = None,
    n_ctx: CtxOpt = None,
    kv_type: Annotated[Optional[str], typer.Option(
        "--kv-type", help="f16, q8_0 or q4_0." + configured("kv_type"))] = None,
    threads: Annotated[Optional[int], typer.Option(
        "--threads", help="CPU threads to decode with." + configured("threads", "0 (the physical cores)"))] = None,
    gpu_layers: Annotated[Optional[int], typer.Option(
        "--gpu-layers", "-ngl", help="Layers to offload to the GPU, where the build has one."
                                     + configured("gpu_layers", "-1 (all)"))] = None,
    as_json: Annotated[bool, typer.Option("--json", metavar=FLAG, help="One JSON object per turn per line.")] = False,
    session: Annotated[Optional[str], typer.Option("--session", help="Create or continue a saved session.")] = None,
    continue_latest: ContinueOpt = False,
    allow_long_ctx: LongCtxOpt = False,
    server: ServerOpt = None,
    api_key: ApiKeyOpt = None,
    attach: Annotated[Optional[list[Path]], typer.Option(
        "--attach", help="A file or folder (text, Markdown, code, PDF) to answer from; repeatable.")] = None,
    image: Annotated[Optional[list[Path]], typer.Option(
        "--image", help="An image (PNG, JPEG, BMP, GIF) the first question is about, read through the model's "
                        "projector (see --mmproj); repeatable.")] = None,
    mmproj: MmprojOpt = None,
    image_max_tokens: Annotated[Optional[int], typer.Option(
        "--image-max-tokens", help="The most tokens one image may cost, for projectors that scale an image to a "
                                   "budget." + configured("image_max_tokens", "0 (the projector's own)"))] = None,
    draft: DraftOpt = None,
    draft_max: DraftMaxOpt = None,
    think_budget: ThinkBudgetOpt = None,
    think_budget_message: ThinkMessageOpt = None,
    thinking_history: ThinkingHistoryOpt = None,
    hide_thinking: Annotated[bool, typer.Option(
        "--hide-thinking", metavar=FLAG, help="Print a thinking model's thoughts nowhere (they are dimmed on "
                                              "stderr otherwise); --json records keep them.")] = False,
    think_more: Annotated[int, typer.Option(
        "--think-more", help="A thinking model: after the last reply, think on up to N more tokens from the end "
                             "of its thought, then answer again: a new reply beside it (the cache is cut back "
                             "there, nothing is prefilled again).")] = 0,
    branch_from: Annotated[Optional[str], typer.Option(
        "--branch-from", help="With --session: the first prompt becomes a new question after this reply's id "
                              "(see chatapp sessions tree; 'root' for a new first question), and the run "
                              "continues on that branch.")] = None,
    edit: Annotated[Optional[str], typer.Option(
        "--edit", help="With --session: the first prompt replaces this message (a question, or a tool call's "
                       "result) as a new one beside it, which the model answers; the run continues on that "
                       "branch (see chatapp sessions tree).")] = None,
    logprobs: Annotated[int, typer.Option(
        "--logprobs", help=f"Each reply token's probability and its top N alternatives, as a table after the "
                           f"reply; with --json also its rank, entropy and the sampler chain's share "
                           f"(0 to {MAX_LOGPROBS}).")] = 0,
    at_token: Annotated[Optional[int], typer.Option(
        "--at-token", help="With --branch-from REPLY and --token: keep the reply's first K tokens, put --token "
                           "in place of the next one, and decode on from there (a new sibling reply).")] = None,
    token: Annotated[Optional[int], typer.Option("--token", help="The token id that replaces token K "
                                                                 "(see --json --logprobs N).")] = None,
    tool: Annotated[Optional[list[str]], typer.Option(
        "--tool", help="Offer this tool to the model (see chatapp tools list); repeatable.")] = None,
    tools: Annotated[bool, typer.Option("--tools", metavar=FLAG, help="Offer every enabled tool.")] = False,
    tool_choice: Annotated[str, typer.Option(
        "--tool-choice", help="auto, none, required (the first reply must call a tool) or a tool's name.")] = "auto",
    allow_tool: Annotated[Optional[list[str]], typer.Option(
        "--allow-tool", help="Let calls of this tool run without asking; repeatable. Others are refused.")] = None,
    allow_tools: Annotated[bool, typer.Option("--allow-tools", metavar=FLAG,
                                              help="Let every offered tool's calls run.")] = False,
    incognito: Annotated[bool, typer.Option(
        "--incognito", help="Keep this chat nowhere. Without it (or --session), every ask is kept as a new "
                            "session named after its first question, as every TUI chat is."
                            + configured("incognito"))] = False,
    schema: Annotated[Optional[str], typer.Option(
        "--schema", help="Every reply is a JSON value of this schema: a file, JSON text, or llm's concise form "
                         "('name, age int, bio: one sentence'; types int, float, bool, str). llama.cpp keeps the "
                         "reply to it with a grammar; the reply is checked after the turn (--json: schema_valid, "
                         "schema_error). Kept with the session: a resumed one keeps it; 'off' drops it.")] = None,
    grammar: Annotated[Optional[Path], typer.Option(
        "--grammar", help="Every reply follows this GBNF file (its `root` rule), as llama.cpp's "
                          "--grammar-file.")] = None,
    grammar_mask: Annotated[bool, typer.Option(
        "--grammar-mask", metavar=FLAG, help="With --schema or --grammar and --json: per reply token, how many "
                                             "vocabulary entries the grammar allowed and the probability it cut "
                                             "(every entry is then masked, not only the best few: slower).")] = False,
    preset: PresetOpt = None,
) -> None:
    """Ask one or more questions in one conversation; print replies and per-turn stats.

    `echo TEXT | chatapp ask` asks TEXT, as `llm` and `ollama run` do.
    """
    from chatapp.commands.peer_words import as_prompt

    prompts = list(prompts or ())
    if any(not p.strip() for p in prompts):
        raise InputError("the prompt is empty")
    prompts = [as_prompt(p) for p in prompts]  # /bye and the like end nothing here: said, never sent
    session = session_to_open(session, continue_latest)
    if branch_from is not None and session is None:
        raise InputError("--branch-from needs --session (or --continue): it names a message of a saved session")
    if edit is not None and (session is None or branch_from is not None):
        raise InputError("--edit needs --session (or --continue), and no --branch-from: it names a message of a "
                         "saved session")
    if (at_token is None) != (token is None) or (at_token is not None and branch_from is None):
        raise InputError("--at-token and --token go together, with --branch-from REPLY")
    if at_token is None:  # a branch from a token continues a reply: its prompt is only a placeholder
        prompts = with_piped_text(prompts)
    elif len(prompts) != 1:
        raise InputError("a branch from a token continues the reply itself: give one placeholder prompt, e.g. -")
    check_logprobs(logprobs)
    if think_more < 0:
        raise InputError(f"--think-more takes a number of tokens, 1 or more, not {think_more}")
    from chatapp.commands.ask_tools import ToolOptions

    tool_options = ToolOptions(tuple(tool or ()), tools, tool_choice, tuple(allow_tool or ()), allow_tools)
    tool_options.check()
    shape_off = schema is not None and schema.strip().lower() == "off" and grammar is None
    shape = None if shape_off else reply_shape(schema, grammar, tools_wanted=tool_options.wanted)
    if grammar_mask and shape is None:
        raise InputError("--grammar-mask counts a grammar's mask: give --schema or --grammar too")
    from chatapp.engine.retrieval.loading import load_paths

    loaded = load_paths(list(attach or ()))  # a bad file fails here, before the model loads
    from chatapp.engine.images import read_image_files

    images = read_image_files(list(image or ()))
    if images and (branch_from is not None or edit is not None):
        raise InputError("--image goes with a new question: an edited question keeps its images, and a branch "
                         "from a reply asks without them")
    if mmproj is not None and not mmproj.is_file():
        raise InputError(f"no projector file at {mmproj}")
    settings, chosen = settings_with_preset(
        preset, model, session, system_prompt=system, max_tokens=max_tokens, temperature=temperature, seed=seed,
        n_ctx=n_ctx, kv_type=kv_type, threads=threads, gpu_layers=gpu_layers,
        allow_long_ctx=allow_long_ctx or None, server=server, api_key=api_key, draft=draft, draft_max=draft_max,
        think_budget=think_budget, think_budget_message=think_budget_message,
        thinking_history=thinking_history, incognito=incognito or None, mmproj=str(mmproj) if mmproj else None,
        image_max_tokens=image_max_tokens)
    if chosen is not None and chosen.tools and chosen.tools != "none" and not tool_options.wanted and shape is None:
        # the preset's tools; --tool, --tools, --schema hold over it
        tool_options = ToolOptions((), True, chosen.tools, source=f"preset {chosen.name}'s tools")
    from chatapp.commands.ask_output import run_ask

    run_ask(settings, model, prompts, as_json=as_json, session=session, attachments=loaded, system=system,
            branch_from=branch_from, logprobs=logprobs, at_token=(at_token, token) if at_token is not None else None,
            tools=tool_options if tool_options.wanted else None, think_more=think_more,
            given=frozenset(name for name, value in (("think", think_budget), ("history", thinking_history))
                            if value is not None), hide_thinking=hide_thinking, edit=edit, shape=shape,
            grammar_mask=grammar_mask, preset=chosen.name if chosen else None, images=images,
            keep_shape=shape is not None or shape_off)


def reply_shape(schema: str | None, grammar: Path | None, *, tools_wanted: bool):
    """--schema or --grammar as the engine takes it (chatapp.engine.shape), checked before the model loads."""
    if schema is None and grammar is None:
        return None
    if schema is not None and grammar is not None:
        raise InputError("--schema and --grammar each set the reply's shape: give one of them")
    if tools_wanted:
        raise InputError("--schema and --grammar do not go with --tool/--tools: a tool call's grammar shapes those "
                         "replies")
    from chatapp.engine.shape import grammar_shape, schema_shape

    return schema_shape(schema) if schema is not None else grammar_shape(str(grammar))


PIPED_CAP = 16 << 20
"""The most bytes of stdin `ask` reads: far more than any context holds (a 1M-token context is
about 4 MiB of text); a longer stream is refused, not read into memory whole."""


def with_piped_text(prompts: list[str]) -> list[str]:
    """The questions with the text piped on stdin, as `llm` takes it: alone, that text is the
    question; with questions on the command line, it goes before the first one (llm joins them
    with a space; a blank line keeps a pasted file apart from the question about it).

    A terminal on stdin is not read: without a question that stays click's error."""
    stream = sys.stdin
    if stream is None or stream.isatty():
        if not prompts:
            raise InputError("Missing argument 'prompts'.")
        return prompts
    piped = read_piped(stream).rstrip()
    if not piped.strip():
        if not prompts:
            raise InputError("Missing argument 'prompts': give a question, or pipe one on stdin (it was empty)")
        return prompts
    return [f"{piped}\n\n{prompts[0]}", *prompts[1:]] if prompts else [piped]


def read_piped(stream) -> str:
    """All of stdin as text; one line for more than PIPED_CAP, bytes that are not UTF-8 or a NUL."""
    data = getattr(stream, "buffer", None)
    raw = data.read(PIPED_CAP + 1) if data is not None else stream.read(PIPED_CAP + 1).encode("utf-8", "replace")
    if len(raw) > PIPED_CAP:
        raise InputError(f"stdin holds more than {PIPED_CAP >> 20} MiB, more than any context: ask about a "
                         "part of it, or --attach the file to answer from")
    try:
        text = raw.decode("utf-8-sig")  # Windows tools start UTF-8 with a byte order mark
    except UnicodeDecodeError as exc:
        raise InputError(f"stdin is not valid UTF-8 (byte {exc.start:,} is 0x{raw[exc.start]:02x}); "
                         "pipe text in UTF-8") from None
    if "\0" in text:
        raise InputError(f"stdin holds a NUL byte (at character {text.index(chr(0)):,}): pipe text, not binary data")
    return text


TOKEN_CUT = "│"
"""Between two tokens where no colour shows the cut (a box-drawing bar, rare in text)."""


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
        print(strict_json([t.to_json() for t in tokens], ensure_ascii=False))
        return
    out = SafeConsole()
    styles = ("black on cyan", "black on yellow")
    line = Text()
    cut = "" if out.draws_colour else TOKEN_CUT  # piped, the colours that show the cut are gone
    for i, token in enumerate(tokens):
        style = "bold white on magenta" if token.special else styles[i % 2]
        # An empty piece is a token holding part of a character the next token completes.
        line.append((cut if i else "") + (visible_text(token.piece.replace("\n", "↵\n")) or "⋯"), style=style)
    out.print(line)
    noun = "token" if len(tokens) == 1 else "tokens"
    out.print(f"[bold]{len(tokens)}[/] {noun} · ids: {' '.join(str(t.id) for t in tokens)}", highlight=False)


def register(app: typer.Typer) -> None:
    """Put the root callback (--version, bare `chatapp`) and chat, ask, tokenize on `app`."""
    app.callback(invoke_without_command=True)(root)
    for command in (chat, ask, tokenize):
        app.command()(command)
