"""Runs `chatapp ask`: streams replies, then one stats line (or one JSON object) per turn."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Iterator, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

import typer
from rich.console import Console
from rich.markup import escape

from chatapp.commands.ask_tools import ToolOptions, call_line, open_tools, tool_turns_for
from chatapp.commands.terminal import SafeConsole
from chatapp.config import THINKING_HISTORIES, Settings
from chatapp.engine.events import ContextRetrieved, ContextTrimmed, TextDelta, ThoughtDelta, TurnDone
from chatapp.engine.retrieval.context import RetrievedContext
from chatapp.engine.retrieval.loading import Loaded
from chatapp.engine.sampling import TokenProbs
from chatapp.engine.stats import DRAFT_KEYS, ROOFLINE_KEYS, TurnRecord
from chatapp.errors import INTERRUPTED, ChatappError, InputError, OutputError, ServerError
from chatapp.format import strict_json, visible_piece, visible_text

if TYPE_CHECKING:  # both are imported where they are first needed, after the arguments are checked
    from chatapp.engine.chat.engine import Engine
    from chatapp.engine.chat.tool_turns import ToolTurns
    from chatapp.engine.sessions import LiveSession, SessionManager
    from chatapp.engine.shape import ReplyShape


def stats_line(record: TurnRecord) -> str:
    parts = [
        f"prompt {record.prompt_tokens} tok ({record.cached_tokens} cached, {record.prefill_tokens} prefilled)",
        f"prefill {record.prefill_tps:,.0f} tok/s",
        f"TTFT {record.ttft_ms:,.0f} ms",
        f"decode {record.decode_tokens} tok at {record.decode_tps:,.1f} tok/s",
        f"KV {record.kv_used}/{record.n_ctx}",
    ]
    drafted = record.extra.get("draft_tokens")
    if drafted:
        accepted = record.extra.get("draft_accepted", 0)
        parts.insert(4, f"drafted {drafted} tok, {accepted} accepted ({accepted / drafted:.0%}) in "
                        f"{record.extra.get('decode_steps', 0)} steps")
    if record.restored_tokens:
        parts.insert(0, f"restored {record.restored_tokens} tok in {record.restore_ms:,.0f} ms")
    if record.finish_reason != "stop":
        parts.append({"length": "hit --max-tokens", "context": "context full",
                      "stopped": "stopped"}.get(record.finish_reason, record.finish_reason))
    return " · ".join(parts)


class TurnOutput:
    """stdout for replies. When it fails (a full disk, a reader that went away), the turns still
    run to the end and are saved; the failure is raised once they are."""

    def __init__(self) -> None:
        self.failed: OutputError | None = None
        self._mid_line = False  # the last text written did not end its line
        self._broken = False  # end_line ended the reply's line: end_reply adds nothing

    def write(self, text: str) -> None:
        if text:
            self._mid_line, self._broken = not text.endswith("\n"), False
        if self.failed is None:
            try:
                # a reply streams piece by piece; each control character is one code point, so
                # showing them piece by piece is the same as showing the whole reply's
                sys.stdout.write(visible_text(text))
                sys.stdout.flush()
            except OutputError as exc:
                self.failed = exc

    def end_line(self) -> None:
        """End the reply's line before a notice on stderr comes in the middle of a turn (a refused
        tool call): in a terminal the notice would otherwise go on after the reply's text."""
        if self._mid_line:
            self.write("\n")
            self._broken = True

    def end_reply(self) -> None:
        """The newline after a reply, unless end_line has just written it."""
        if not self._broken:
            self.write("\n")
        self._broken = False

    def raise_if_failed(self) -> None:
        if self.failed is not None:
            raise self.failed


class ThoughtEcho:
    """A thinking model's thought, dimmed on stderr as it streams, between "thinking:" and
    "(end of thought)": stdout keeps the answer alone, for a pipe."""

    def __init__(self, err: Console) -> None:
        self.err, self.open = err, False

    def write(self, text: str) -> None:
        if not self.open:
            self.err.print("[dim]thinking:[/]")
            self.open = True
        self.err.print(text, style="dim", end="", markup=False, highlight=False)

    def end(self) -> None:
        if self.open:
            self.err.print("\n[dim](end of thought)[/]")
            self.open = False


@contextlib.contextmanager
def ctrl_c_stops(engine: Engine) -> Iterator[threading.Event]:
    """The first Ctrl+C stops the turn (the reply so far is kept and saved, even mid-prefill:
    llama.cpp abandons the batch it is on), or the opening of the session; a second one quits
    at once, like kill -9 (saved sessions survive that). The handler may run inside llama.cpp's
    abort callback, where an exception could only be printed and ignored, so it never raises.
    Only on the main thread. Yields the event the first Ctrl+C sets: the engine clears its own
    stop when a turn starts, so a Ctrl+C that came before must be remembered here."""
    stopping = threading.Event()

    def interrupt(_signum, _frame) -> None:
        if stopping.is_set():
            os.write(2, b"chatapp: interrupted\n")
            os._exit(130)
        stopping.set()
        engine.stop()
        os.write(2, b"\nstopping... (Ctrl+C again quits at once)\n")

    try:
        previous = signal.signal(signal.SIGINT, interrupt)
    except ValueError:  # not the main thread: leave Ctrl+C as it is
        yield stopping
        return
    try:
        yield stopping
    finally:
        signal.signal(signal.SIGINT, previous)


def sources_line(context: RetrievedContext) -> str:
    """E.g. "retrieved: docs/typer.md lines 10-42 "Installation" (3.1), notes.txt (whole file)"."""
    return "retrieved: " + ", ".join(entry.label().strip("[]") + ("" if entry.whole else f" (score {entry.score:.2f})")
                                     for entry in context.entries)


def schema_line(extra: dict) -> str:
    """After a reply under --schema: whether it is valid, and where it is not (rich markup)."""
    if extra["schema_valid"]:
        return "[dim]schema: the reply is valid[/]"
    return f"[yellow]schema: the reply is not valid: {escape(str(extra.get('schema_error', '')))}[/]"


def alternatives_table(probs: Sequence[TokenProbs]) -> str:
    """`ask --logprobs N` without --json: one line per reply token, its probability and the
    model's top candidates, e.g. `  ' blue'  62.1%  | ' red' 20.3% · ' green' 9.8%`."""
    lines = ["", "token probabilities (the model's own; candidates most likely first):"]
    width = min(max((len(visible_piece(step.token)) for step in probs), default=0) + 2, 24)
    for step in probs:
        others = " · ".join(f"{visible_piece(c.token)!r} {c.p:.1%}" for c in step.top if c.id != step.id)
        lines.append(f"  {visible_piece(step.token)!r:<{width}} {step.p:6.1%}  | {others}")
    return "\n".join(lines) + "\n"


def run_ask(settings: Settings, model: str | None, prompts: list[str], *, as_json: bool,
            session: str | None = None, attachments: list[Loaded] | None = None, system: str | None = None,
            branch_from: str | None = None, logprobs: int = 0, at_token: tuple[int, int] | None = None,
            tools: ToolOptions | None = None, think_more: int = 0, given: frozenset[str] = frozenset(),
            hide_thinking: bool = False, edit: str | None = None, shape: ReplyShape | None = None,
            grammar_mask: bool = False, preset: str | None = None,
            images: list[tuple[str, bytes]] | None = None, keep_shape: bool = False) -> None:
    """`images`: (name, bytes) of the images the first prompt is about (ask --image);
    `preset`: the preset's name the settings came from (chatapp.presets), in every record and kept
    with the session;
    `system`: the --system given, which replaces a resumed session's system prompt;
    `given`: the thinking flags given ("think": --think-budget, "history": --thinking-history),
    which hold over the session's kept choices and are kept (a flag not given: the session's
    choice holds); `hide_thinking`: thoughts are
    not echoed on stderr;
    `branch_from`: the message (of `session`) the first prompt branches after;
    `edit`: the message (of `session`, a question or a tool's result) the first prompt replaces;
    `logprobs`: candidates per reply token for the JSON records (0: none);
    `think_more`: after the last reply, a reply beside it that thinks on that many more tokens;
    `shape`: the schema or grammar every reply keeps to (ask --schema, --grammar), and with
    `grammar_mask` its mask counted per token; `keep_shape`: --schema or --grammar was given (`shape`
    None: `--schema off`), and the session keeps what it says; else a resumed session's kept shape holds."""
    from chatapp.commands.opening import open_engine

    err = SafeConsole(stderr=True, highlight=False, soft_wrap=True)
    out = TurnOutput()
    manager: SessionManager | None = None
    kept_as = None
    if session is not None:
        from chatapp.engine.sessions import SessionManager, validate_name

        validate_name(session)
        manager = SessionManager.open(settings)  # before loading the model: a bad database fails fast
        _check_target(manager, session, branch_from, edit)  # and a bad message id
    elif not settings.incognito:
        manager, kept_as = keep_chat(settings, prompts[0], err)
        session = kept_as
    for notice in manager.notices if manager is not None else ():
        err.print(f"[yellow]sessions: {escape(notice)}[/]")
    registry, offered = open_tools(tools, err) if tools is not None else (None, [])  # a wrong choice: before the load
    try:
        engine = open_engine(settings, model, err)
    except BaseException:
        if registry is not None:
            registry.close()
        raise
    for notice in engine.load_notices:
        err.print(f"[yellow]{escape(notice)}[/]")
    engine.set_generation(logprobs=logprobs, shape=shape, grammar_mask=grammar_mask)
    stopped = threading.Event()
    try:
        if tools is not None:
            tool_turns = tool_turns_for(engine, registry, offered, tools, err, out.end_line)
        with ctrl_c_stops(engine) as stopped:
            kept = _ask(engine, manager, session, prompts, as_json, err, out, attachments or [], system, stopped,
                        branch_from, at_token, tool_turns if tools is not None else None, think_more, given,
                        hide_thinking, edit, new=kept_as is not None, preset=preset, images=images or [],
                        keep_shape=keep_shape, shape=shape)
        if kept_as is not None:  # the name it took: the next free one if another chat took this one meanwhile
            kept_as = kept
    finally:
        if registry is not None:
            registry.close()
        engine.close()
    if kept_as is not None and not as_json:  # saved by its first turn; --json records say "session"
        err.print(f"[dim]kept as session {escape(repr(kept_as))}: chatapp ask --continue goes on with it[/]")
    out.raise_if_failed()
    if stopped.is_set():  # a Ctrl+C: what ran is kept, and the exit says it was interrupted, as a shell's
        raise typer.Exit(INTERRUPTED)


def _check_target(manager: SessionManager, session: str, branch_from: str | None, edit: str | None) -> None:
    """--branch-from and --edit name a message of the saved tree: an unknown or wrong one is
    refused before the model loads and the cache is restored (the engine checks it again)."""
    if branch_from is None and edit is None:
        return
    from chatapp.engine.chat.tree import MessageTree

    stored = manager.store.load(session)
    if stored is None:  # resuming says what is wrong with the name
        return
    tree = MessageTree.from_messages(stored.tree, stored.leaf)
    if branch_from is not None:
        tree.branch_point(branch_from)
    if edit is not None:
        tree.editable(edit)


def keep_chat(settings: Settings, question: str, err: Console) -> tuple[SessionManager | None, str | None]:
    """Every `ask` is kept, as every chat in the TUI is: a new session named after its first
    question (the config's `incognito`, or --incognito, keeps none). A sessions folder that cannot
    be used keeps nothing and says so in one line; the question is asked all the same."""
    from chatapp.engine.sessions import SessionManager

    try:
        manager = SessionManager.open(settings)
        return manager, manager.name_for(question)
    except (ChatappError, OSError) as exc:
        error = exc.one_line() if isinstance(exc, ChatappError) else str(exc)
        err.print(f"[yellow]sessions: this chat is not kept: {escape(error)}[/]")
        return None, None


def _session_thinking(engine: Engine, live: LiveSession, given: frozenset[str], err: Console) -> None:
    """A thinking model's mode and earlier thoughts' keeping as the session keeps them (the TUI's
    choices, or earlier flags), where the command line does not say (`given`: "think" for
    --think-budget, "history" for --thinking-history; `_keep_thinking` keeps what they say)."""
    thinking = engine.thinking
    if not thinking.format.active:
        return
    kept = live.manager.store.choices(live.name)
    if "history" not in given and kept.history in THINKING_HISTORIES and kept.history != thinking.history:
        thinking.history = kept.history
        err.print(f"[dim]session {escape(live.name)}: earlier thoughts {kept.history}, as it was left[/]")
    if "think" not in given and kept.think and kept.think != thinking.mode:
        try:
            err.print(f"[dim]session {escape(live.name)}: thinking {thinking.set_mode(kept.think)}, as it was left[/]")
        except ChatappError as exc:
            err.print(f"[yellow]session {escape(live.name)}: its thinking mode is not used: "
                      f"{escape(exc.one_line())}[/]")


def _keep_thinking(engine: Engine, live: LiveSession, given: frozenset[str], err: Console) -> None:
    """After the run's saves (a new session exists then): the session keeps what the flags in
    `given` chose."""
    thinking, store = engine.thinking, live.manager.store
    chosen = {name: value for name, value in (("think", thinking.mode), ("history", thinking.history))
              if name in given}
    try:
        kept = store.choices(live.name)
        if thinking.format.active and replace(kept, **chosen) != kept:
            store.set_choices(live.name, replace(kept, **chosen))
    except ChatappError as exc:
        err.print(f"[yellow]session {escape(live.name)}: thinking choices not kept: {escape(exc.one_line())}[/]")


def _session_shape(engine: Engine, live: LiveSession, err: Console) -> None:
    """The reply shape the session was left with (in the TUI, or by an earlier --schema), where
    this run gives none; checked again, so an edited database costs the shape, not the session."""
    from chatapp.engine.shape import shape_from_json

    kept = live.manager.store.choices(live.name).shape
    if not kept:
        return
    try:
        shape = shape_from_json(kept)
    except ChatappError as exc:
        err.print(f"[yellow]session {escape(live.name)}: its reply shape is not used: {escape(exc.one_line())}[/]")
        return
    engine.set_generation(shape=shape)
    err.print(f"[dim]session {escape(live.name)}: every reply is a value of the {escape(shape.describe())}, "
              "as it was left (--schema off drops it)[/]")


def _keep_shape(live: LiveSession, shape: ReplyShape | None, err: Console) -> None:
    """After the run's saves: the session keeps the --schema or --grammar given (none: `--schema off`)."""
    store = live.manager.store
    try:
        kept = store.choices(live.name)
        wanted = shape.to_json() if shape is not None else ""
        if kept.shape != wanted:
            store.set_choices(live.name, replace(kept, shape=wanted))
    except ChatappError as exc:
        err.print(f"[yellow]session {escape(live.name)}: reply shape not kept: {escape(exc.one_line())}[/]")


def _keep_preset(live: LiveSession, preset: str, err: Console) -> None:
    """The session keeps the preset its turns ran with (its choices, beside the thinking mode)."""
    store = live.manager.store
    try:
        kept = store.choices(live.name)
        if kept.preset != preset:
            store.set_choices(live.name, replace(kept, preset=preset))
    except ChatappError as exc:
        err.print(f"[yellow]session {escape(live.name)}: preset not kept: {escape(exc.one_line())}[/]")


def add_images(engine: Engine, images: list[tuple[str, bytes]], err: Console) -> tuple[str, ...]:
    """Give the --image files (read before the model loaded) to the engine, read but not yet
    encoded, and say what each costs; their hashes."""
    shas = []
    for name, data in images:
        facts = engine.add_image(data, name)
        err.print(f"[dim]image {escape(facts.describe())}[/]")
        shas.append(facts.sha256)
    return tuple(shas)


def _attach(engine: Engine, attachments: list[Loaded], err: Console) -> None:
    """Size the files read before the model loaded for it, and say how each one is used."""
    report = engine.add_attachments([a for loaded in attachments for a in loaded.attachments],
                                    [n for loaded in attachments for n in loaded.notices])
    for notice in report.notices:
        err.print(f"[yellow]{escape(notice)}[/]")
    for plan in report.added:
        how = "whole" if plan.whole else f"{len(plan.chunks)} chunks"
        err.print(f"[dim]attached {escape(plan.attachment.name)}: {plan.tokens:,} tokens, {how}[/]")


def _ask(engine: Engine, manager: SessionManager | None, session: str | None, prompts: list[str], as_json: bool,
         err: Console, out: TurnOutput, attachments: list[Loaded], system: str | None = None,
         stopped: threading.Event | None = None, branch_from: str | None = None,
         at_token: tuple[int, int] | None = None, tool_turns: ToolTurns | None = None, think_more: int = 0,
         given: frozenset[str] = frozenset(), hide_thinking: bool = False, edit: str | None = None,
         new: bool = False, preset: str | None = None, images: list[tuple[str, bytes]] = (),
         keep_shape: bool = False, shape: ReplyShape | None = None) -> str | None:
    """Runs the prompts; returns the name the session is kept under (None: no session). `new`: the
    session is a new chat named after its question (see SessionManager.resume)."""
    from chatapp.engine.chat.tool_turns import ToolCallDone
    from chatapp.engine.sessions.manager import OpeningStopped

    summary = engine.summary
    try:
        live = manager.resume(session, engine, system_prompt=system, stop=stopped, new=new) \
            if manager is not None and session else None
    except OpeningStopped as exc:  # as a stopped turn: said, and nothing more is run
        err.print(f"[yellow]{escape(exc.message)}[/]")
        return
    if stopped is not None and stopped.is_set():  # Ctrl+C as the opening ended: no prompt runs
        err.print(f"[yellow]stopped before the first prompt; nothing was sent{' or saved' if live else ''}[/]")
        return
    if live is not None:
        branches = branch_from is not None or edit is not None  # --at-token comes with --branch-from
        for line in filter(None, (live.report.notice_for(branches=branches), *live.report.notices)):
            err.print(f"[dim]session {escape(session)}: {escape(line)}[/]")
        _session_thinking(engine, live, given, err)
        if not keep_shape and tool_turns is None:
            _session_shape(engine, live, err)
    if attachments:
        from chatapp.engine.retrieval.cancel import AttachStopped, stoppable

        try:
            with stoppable(stopped or threading.Event()):  # the first Ctrl+C stops the sizing too
                _attach(engine, attachments, err)
        except AttachStopped as exc:  # as a stopped opening: said, and no prompt runs
            err.print(f"[yellow]attach {escape(exc.message)}; no prompt was sent[/]")
            return
    shas = add_images(engine, list(images), err) if images else ()
    said_drafting = ""
    for number, prompt in enumerate([*prompts, *([None] if think_more else [])], 1):
        record = None
        if live is not None and number > 1 and (changed := live.changed_elsewhere()):
            # Another process saved between two of our prompts: go on from what it saved.
            live = manager.resume(live.name, engine, system_prompt=system)
            err.print(f"[yellow]{escape(changed.message)}; reloaded it before prompt {number}[/]")
        if prompt is None:  # --think-more: beside the last reply, its thought gone on with
            turn = engine.think_more(think_more)
        elif at_token is not None and number == 1:
            turn = engine.branch_from_token(branch_from, *at_token)
        elif branch_from is not None and number == 1:
            turn = engine.send_after(branch_from, prompt)
        elif edit is not None and number == 1:  # beside the question or tool result it replaces
            turn = engine.edit(edit, prompt)
        else:
            turn = engine.send(prompt, images=shas if number == 1 else ())
        if tool_turns is not None:
            turn = tool_turns.run(lambda turn=turn: turn)
            schema_tokens = engine.tool_costs().per_tool if as_json else {}
        thought = ThoughtEcho(err)
        for event in turn:
            if isinstance(event, ThoughtDelta) and not as_json and not hide_thinking:
                thought.write(event.text)
            elif isinstance(event, ContextTrimmed):
                err.print(f"[yellow]context full: dropped the oldest {event.dropped_turns} turn(s) "
                          f"({len(event.dropped)} messages) to fit this one[/]")
            elif isinstance(event, ContextRetrieved):
                err.print(f"[dim]{escape(sources_line(event.context))}[/]")
            elif isinstance(event, TextDelta) and not as_json:
                thought.end()
                if stopped is None or not stopped.is_set():  # nothing after "stopping...", though the turn keeps it
                    out.write(event.text)
            elif isinstance(event, ToolCallDone):
                err.print(f"[dim]{escape(call_line(event))}[/]")
            elif isinstance(event, TurnDone):
                record = event.record
                if preset is not None:  # before the save: the turn's record keeps it
                    record.extra["preset"] = preset
                thought.end()
                if not as_json:
                    out.end_reply()  # the reply's line ends before anything about its save
                if live is not None:
                    saved = live.save_turn(record)
                    record = saved.record
                    if preset is not None:
                        _keep_preset(live, preset, err)
                    for notice in saved.notices:
                        err.print(f"[yellow]session {escape(live.name)}: {escape(notice)}[/]")
                if as_json:
                    data = record.to_json()
                    data.update(model=summary.name, quant=summary.quant, backend=summary.backend,
                                layers_offloaded=summary.layers_offloaded, server=summary.server)
                    if summary.kv_bytes_per_token is None:  # the backend cannot tell: not a zero
                        data["kv_bytes_per_token"] = None
                    for key in (*DRAFT_KEYS, *ROOFLINE_KEYS):  # a backend without the figure: null
                        data.setdefault(key, None)
                    if tool_turns is not None:
                        data.setdefault("tool_calls", [])
                        data["tool_schema_tokens"] = schema_tokens
                    out.write(strict_json(data, ensure_ascii=False) + "\n")
                elif not record.extra.get("server_error"):  # a broken turn gets its one line below
                    if record.probs:
                        out.write(alternatives_table(record.probs))
                    err.print(f"[dim]{stats_line(record)}[/]")
                    if "schema_valid" in record.extra:
                        err.print(schema_line(record.extra))
                    if said := record.extra.get("grammar_not_reported"):
                        err.print(f"[dim]grammar: {escape(str(said))}[/]")
                    if end := record.extra.get("tool_loop_end"):  # why the tool loop went no further
                        err.print(f"[yellow]tool loop: {escape(str(end))}[/]")
                why = str(record.extra.get("draft_off_because", ""))
                if why and why != said_drafting:  # found out at the first drafted turn: said once
                    err.print(f"[yellow]drafting off: {escape(why)}[/]")
                    said_drafting = why
        if record is not None and record.extra.get("server_error"):
            raise ServerError(str(record.extra["server_error"]))  # what was said is kept (and saved)
        if record is not None and engine.generation.logprobs and record.generated_tokens and not record.probs:
            raise InputError(f"--logprobs: {summary.location} gave no token probabilities for the reply "
                             "(a llama-server gives them as n_probs); the turn is kept")
        if record is not None and record.finish_reason == "stopped":
            if number < len(prompts):
                err.print(f"[yellow]stopped; skipped the remaining {len(prompts) - number} prompt(s)[/]")
            break
    if live is not None and given:
        _keep_thinking(engine, live, given, err)
    if live is not None and keep_shape:
        _keep_shape(live, shape, err)
    return live.name if live is not None else None
