"""The chat App: layout, key bindings, thin thread workers around the engine, message handlers.

llama.cpp never runs on the UI thread. Each worker calls headless engine code and only posts
messages (chatapp.ui.messages); the handlers here hand the results to the widgets. Sessions,
attachments and the look inside the model each have a controller the app holds
(`sessions_ui`, `attachments_ui`, `inside_ui`): their actions and message handlers here only
delegate to it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from textual import on, work
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.command import CommandPalette
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.driver import Driver
from textual import events
from textual.events import Resize
from textual.reactive import var
from textual.screen import ModalScreen
from textual.timer import Timer
from textual.widgets import Footer, Tab, Tabs, TextArea
from textual.worker import get_current_worker

from chatapp.config import Settings, save_setting
from chatapp.engine.chat.engine import Engine
from chatapp.engine.machine.model_fit import ModelRow
from chatapp.engine.sessions import SessionManager
from chatapp.errors import ChatappError, ConfigError, ContextFullError, InputError, ServerError
from chatapp.ui.attach_control import AttachController, command_of
from chatapp.ui import branch_control
from chatapp.ui.branch_control import SEND, BranchAction, BranchController, TurnHow, start_events
from chatapp.ui.branch_view import shown_path
from chatapp.ui.commands import ChatCommands, ThemePicker
from chatapp.ui.event_loop import close_loop
from chatapp.ui.host import EngineGate
from chatapp.ui.inside_control import InsideController, NeighboursFound
from chatapp.ui.key_bursts import KeyBurst, with_key_bursts
from chatapp.ui.pacing import UpdatePacer
from chatapp.ui.messages import (
    AttachFailed, Attached, BranchChanged, ComposerTokenized, ModelInfoReady, ModelSwitched, ModelSwitchFailed,
    PrefillFinished, PrefillProgressed, ReplyProgress, SessionFailed, SessionOpened, SessionSaved, TreeReady,
    TurnFailed, TurnFinished, TurnRetrieved, TurnStarted, TurnTrimmed, dropped_after_exit,
)
from chatapp.ui.screens.attention import AttentionScreen
from chatapp.ui.screens.help import HelpScreen
from chatapp.ui.screens.model_picker import ModelPickerScreen, ModelsFound
from chatapp.ui.screens.sampling import Sampling, SamplingScreen
from chatapp.ui.screens.sessions import SessionsScreen
from chatapp.ui.screens.system_prompt import SystemPromptScreen
from chatapp.ui.screens.tree import TreeScreen
from chatapp.ui.session_control import SessionController
from chatapp.ui.themes import DEFAULT_THEME, ThemeLoadResult, load_themes, register_themes
from chatapp.ui.turns import decode_gets_the_gil, stream_turn
from chatapp.ui.typing_prefill import TypingPrefill, TypingPrefilled
from chatapp.ui.widgets.composer import Composer
from chatapp.ui.widgets.confidence import VIEW_CANDIDATES
from chatapp.ui.widgets.header import AppHeader
from chatapp.ui.widgets.kv_panel import KVPanel
from chatapp.ui.widgets.quant_panel import QuantPanel
from chatapp.ui.widgets.speed_panel import SpeedPanel
from chatapp.ui.widgets.tokens_panel import TokensPanel
from chatapp.ui.widgets.transcript import Transcript

Opener = Callable[[Settings, str], Engine]
"""Opens the model a spec names with these settings (chatapp.engine.opening.open_engine)."""

WIDE_AT = 120
"""Terminal columns from which the panels sit beside the transcript instead of below it."""
TOKENIZE_DELAY = 0.15
"""Seconds of no typing before the composer is tokenized again."""
QUIT_WINDOW = 2.0
"""Seconds in which a second Ctrl+C quits."""
QUIT_WAIT = 0.75
"""Seconds from the quit key that quitting waits for a running worker to let go of the engine:
a stopped turn does in well under that, and Ctrl+Q is to end chatapp within a second whatever
a worker does (the app's own shutdown comes out of the same time)."""
MIN_QUIT_WAIT = 0.1
PANELS = ("tokens", "kv", "speed", "quant")


class ChatApp(App[None]):
    CSS_PATH = Path(__file__).with_name("app.tcss")
    TITLE = "chatapp"
    COMMANDS = App.COMMANDS | {ChatCommands}
    AUTO_FOCUS = "#composer"

    BINDINGS = [
        Binding("escape", "stop", "Stop", tooltip="Stop the reply being written; the partial reply is kept"),
        Binding("ctrl+c", "interrupt", "Stop/Quit", show=False, priority=True,
                tooltip="Stop the reply; when idle, copy the composer's selection, or press twice within "
                        "2 s to quit"),
        Binding("ctrl+q", "quit", "Quit", show=False, priority=True, tooltip="Quit chatapp"),
        Binding("ctrl+n", "new_chat", "New", tooltip="New chat (keeps the system prompt)"),
        Binding("ctrl+r", "regenerate", "Regen",
                tooltip="Regenerate the selected reply (else the last): a new reply beside it, ‹ n/m ›; "
                        "the old one stays"),
        Binding("ctrl+s", "system_prompt", "System", show=False, tooltip="Edit the system prompt"),
        Binding("ctrl+o", "sampling", "Sampling", show=False,
                tooltip="Set temperature and max tokens"),
        Binding("ctrl+l", "switch_model", "Model", show=False, tooltip="Switch model"),
        Binding("ctrl+t", "change_theme", "Theme", show=False,
                tooltip="Switch theme (previews as you move; Esc restores)"),
        Binding("f1", "help", "Help", tooltip="Show this help"),
        Binding("question_mark", "help", "Help", show=False,
                tooltip="Show this help (when the composer is not focused)"),
        Binding("f2", "toggle_panels", "Panels", tooltip="Show or hide the panels"),
        Binding("f3", "next_panel", "Next panel", tooltip="Next panel: Tokens, KV, Speed, Quant"),
        Binding("f4", "toggle_token_ids", "Ids", show=False, tooltip="Show or hide token ids in the Tokens panel"),
        Binding("f5", "copy_reply", "Copy", show=False, tooltip="Copy the last reply to the clipboard"),
        Binding("f6", "sessions", "Sessions", show=False, priority=True,  # the composer binds F6 too
                tooltip="Saved sessions: open, new, save this chat as, rename, delete"),
        Binding("f7", "anatomy", "Anatomy", show=False, priority=True,  # the composer binds F7 too
                tooltip="The model's anatomy: blocks, heads, experts, bytes per tensor family, KV cost per token"),
        Binding("f8", "detach", "Detach", show=False, tooltip="Remove an attachment (they are listed in the header)"),
        Binding("f9", "attention", "Attention", show=False, priority=True,
                tooltip="Attention in the last turn: which earlier tokens a reply token attended to, per layer "
                        "and head (the reply token selected in the Tokens panel, if any)"),
        Binding("f10", "toggle_confidence", "Confidence", show=False,
                tooltip="Confidence view: reply tokens shaded by their probability; a reply token selected in the "
                        "Tokens panel shows its alternatives before and after the sampler (from the next reply)"),
        Binding("ctrl+p", "command_palette", "Palette", show=False,
                tooltip="Command palette: every action, and the theme picker"),
        *branch_control.BINDINGS,
    ]

    generating: var[bool] = var(False, bindings=True)
    """A turn's worker is running: the composer still works, but Enter waits."""
    loading_model: var[bool] = var(False, bindings=True)
    session_busy: var[bool] = var(False, bindings=True)
    """A session worker is opening, starting or saving a session."""
    attaching: var[bool] = var(False, bindings=True)
    """An attach worker is reading and sizing a file (chatapp.ui.attach_control)."""

    def __init__(self, engine: Engine, *, settings: Settings | None = None, session: str | None = None,
                 themes: ThemeLoadResult | None = None, sessions: SessionManager | None = None,
                 system_prompt: str | None = None, opener: Opener | None = None) -> None:
        """`system_prompt`: one given on the command line, which replaces the system prompt of
        the session opened at start (the engine's settings start a new chat with it already).
        `opener(settings, spec)` opens another model for the model switch (Ctrl+L); without one
        the app keeps the model it was given."""
        self.gate = EngineGate(engine)
        """The engine and its locks: every worker that uses the engine goes through it."""
        self._opener = opener
        self.settings: Settings = settings or engine.settings
        self.session = session
        """The session to open at start (it is created on the first save if it doesn't exist)."""
        # Textual asks for the variable defaults while it sets up, so these come first.
        self.theme_result = themes if themes is not None else load_themes()
        super().__init__()
        register_themes(self, self.theme_result)
        wanted = self.settings.theme or DEFAULT_THEME
        # Only chatapp's themes, as the picker and `chatapp themes list` offer (not Textual's built-ins).
        self._theme_problem = None if wanted in self.theme_result.names() else wanted
        self.theme = wanted if self._theme_problem is None else DEFAULT_THEME
        self._quit_armed_at: float | None = None
        self._quit_at: float | None = None
        """When a quit key was pressed: quitting's wait for workers counts from there."""
        self._tokenize_timer: Timer | None = None
        self._theme_before_preview: str | None = None
        self.reply_pacer = UpdatePacer()
        """Holds back reply text updates when the screen is costly to lay out (chatapp.ui.pacing)."""
        self._panels_shown: bool | None = None
        """None follows the width (shown when wide); F2 makes it the user's choice."""
        self.sessions_ui = SessionController(self, sessions, system_prompt)
        self.attachments_ui = AttachController(self)
        self.inside_ui = InsideController(self)
        self.branches_ui = BranchController(self, self.sessions_ui)
        self.typing_prefill = TypingPrefill(self)
        """Prefills the next prompt while it is typed (chatapp.ui.typing_prefill)."""

    def get_driver_class(self) -> type[Driver]:
        return with_key_bursts(super().get_driver_class())

    def _typing_target(self) -> Composer | None:
        """The composer, when printable keys may go straight to it: focused, editable, on the
        main screen. No binding takes a printable key there, and Textual's checking and
        forwarding cost about 75 µs a key, 1.5 s for 20 KB arriving as typed keys."""
        focused = self.focused
        if isinstance(focused, Composer) and not focused.read_only and len(self.screen_stack) == 1:
            return focused
        return None

    async def on_event(self, event: events.Event) -> None:
        if (isinstance(event, events.Key) and not event.is_forwarded and event.is_printable and event.character
                and (composer := self._typing_target()) is not None):
            self.app_focus = True
            composer.type_text(event.character)
            return
        await super().on_event(event)

    async def on_key_burst(self, burst: KeyBurst) -> None:
        """Printable keys the driver gathered (chatapp.ui.key_bursts): one edit for the composer,
        or each key in turn through Textual's own handling, as if it had come alone."""
        if (composer := self._typing_target()) is not None:
            self.app_focus = True
            composer.type_text(burst.text)
            return
        for key in burst.keys:
            await self.on_event(key)

    def get_theme_variable_defaults(self) -> dict[str, str]:
        return self.theme_result.variable_defaults()

    # --- layout ----------------------------------------------------------------------------
    def compose(self) -> ComposeResult:
        yield AppHeader(id="header")
        with Horizontal(id="main"):
            yield Transcript(id="transcript")
            with Vertical(id="panels"):
                yield Tabs(*(Tab(title, id=f"tab-{key}") for key, title in
                             zip(PANELS, ("Tokens", "KV cache", "Speed", "Quant"))), id="panel-tabs")
                with VerticalScroll(id="panel-stack"):
                    yield TokensPanel(id="tokens", classes="panel -current")
                    yield KVPanel(id="kv", classes="panel")
                    yield SpeedPanel(id="speed", classes="panel")
                    yield QuantPanel(id="quant", classes="panel")
        yield Composer(id="composer")
        yield Footer()

    def on_mount(self) -> None:
        header = self.query_one(AppHeader)
        header.session = self.session
        self._show_model()
        self._apply_layout()
        for failure in self.theme_result.failures:
            self.notify(f"skipped theme file {failure}", title="Theme", severity="warning", timeout=10,
                        markup=False)
        for notice in getattr(self.engine, "load_notices", []):
            self.notify(notice, title="Model", severity="warning", timeout=10, markup=False)
        if self._theme_problem:
            self.notify(f"theme {self._theme_problem!r} is not available; using {DEFAULT_THEME}",
                        title="Theme", severity="warning", timeout=10, markup=False)
        if self.session is not None:
            self.sessions_ui.open_at_start(self.session)

    def on_resize(self, event: Resize) -> None:
        self._apply_layout(event.size.width)  # self.size is updated after this handler runs

    def _apply_layout(self, width: int | None = None) -> None:
        main = self.query_one("#main")
        wide = (self.size.width if width is None else width) >= WIDE_AT
        main.set_class(wide, "-wide")
        main.set_class(wide if self._panels_shown is None else self._panels_shown, "-panels")

    def _show_model(self) -> None:
        """Show what the current engine loaded; the slow GGUF scan runs in a worker."""
        summary = self.engine.summary
        self.query_one(AppHeader).summary = summary
        self.query_one(KVPanel).set_capacity(summary.n_ctx, summary.kv_bytes_per_token, summary.kv_type)
        self.query_one(QuantPanel).show_summary(summary)
        self.query_one(SpeedPanel).backend = summary.backend
        if summary.local_file:
            self.scan_model(Path(summary.local_file))

    # --- sending ---------------------------------------------------------------------------
    @on(Composer.Submitted)
    def _submit(self, message: Composer.Submitted) -> None:
        sent = time.perf_counter()  # the record's ttft_ms counts from here
        self.typing_prefill.stop()
        if command_of(message.text) is not None:
            if self.attachments_ui.composer_command(message.text):
                message.composer.clear()
            return
        if self.busy("send") or self.sessions_ui.changed_elsewhere():
            return
        message.composer.clear()
        self.start_turn(message.text, self.branches_ui.take_pending(), since=sent)

    def start_turn(self, text: str, how: TurnHow = SEND, since: float | None = None) -> None:
        """Run a turn: a new question at the end, or one that branches (chatapp.ui.branch_control).
        `since`: when Enter was pressed (time.perf_counter()), for the record's ttft_ms."""
        self.typing_prefill.stop()
        self.generating = True
        self.query_one(AppHeader).status = "prefill…"
        self.run_turn(text, how, since)

    def busy(self, what: str) -> bool:
        """True (and say so) when a reply is being written or a model is loading."""
        if self.generating:
            self.notify(f"cannot {what} while a reply is being written: Esc stops it", severity="warning")
            return True
        if self.loading_model:
            self.notify(f"cannot {what} while a model loads", severity="warning")
            return True
        if self.session_busy:
            self.notify(f"cannot {what} while a session is opened or saved", severity="warning")
            return True
        if self.attaching:
            self.notify(f"cannot {what} while a file is being attached", severity="warning")
            return True
        return False

    @work(thread=True, exclusive=True, exit_on_error=False, group="turn")
    def run_turn(self, text: str, how: TurnHow = SEND, since: float | None = None) -> None:
        worker = get_current_worker()
        live = self.sessions_ui.live
        autosave = partial(self.sessions_ui.autosave, live) if live is not None else None
        with self.gate.turn() as engine:
            if engine is None:
                return
            branching = how.action != "send"
            try:
                if not branching:
                    self.post_message(TurnStarted(text))
                events = start_events(engine, text, how, since)
                if branching:  # the path it continues, up to its question, is drawn before the reply
                    self.post_message(TurnStarted(text, how.action in ("regenerate", "token"), *shown_path(engine)))
                with decode_gets_the_gil():
                    stream_turn(engine, events, self.post_message, cancelled=lambda: worker.is_cancelled,
                                annotate=live.annotate if live is not None else None, finish=autosave)
            except ChatappError as exc:
                # A turn that never started gives its text back to the composer.
                refused = isinstance(exc, (ContextFullError, InputError, ServerError))
                self.post_message(TurnFailed(exc.one_line(), text, refused=refused))
                if branching and refused:  # the engine took the branch back: draw the path as it was
                    self.post_message(BranchChanged(*shown_path(engine)))
            except Exception as exc:  # noqa: BLE001 - whatever llama.cpp raises, the UI must not stay "generating"
                self.post_message(TurnFailed(f"{type(exc).__name__}: {exc}", text))

    @dropped_after_exit
    async def on_turn_started(self, message: TurnStarted) -> None:
        self.reply_pacer.reset()
        self.query_one(SpeedPanel).show_typing(None)
        transcript = self.query_one(Transcript)
        if message.path is not None:
            await self.branches_ui.turn_started(message.path, message.dropped)
        else:
            await transcript.add_user(message.user_text)
        await transcript.start_reply()

    @dropped_after_exit
    async def on_turn_trimmed(self, message: TurnTrimmed) -> None:
        await self.query_one(Transcript).show_trimmed(message.event)

    @dropped_after_exit
    def on_prefill_progressed(self, message: PrefillProgressed) -> None:
        event = message.event
        if event.done < event.total:
            self.query_one(AppHeader).status = f"prefill {event.done:,}/{event.total:,}…"
        self.query_one(SpeedPanel).show_prefill_progress(event)

    @dropped_after_exit
    def on_prefill_finished(self, message: PrefillFinished) -> None:
        self.query_one(AppHeader).status = "generating…"
        self.query_one(SpeedPanel).show_prefill(message.event)
        self.query_one(KVPanel).show_live(message.event.prompt_tokens)

    @dropped_after_exit
    async def on_reply_progress(self, message: ReplyProgress) -> None:
        # The panels repaint without a layout, so they always keep up; the reply's text waits
        # when the screen has been costly to lay out (TurnFinished brings the whole text).
        if self.reply_pacer.due():
            await self.query_one(Transcript).show_progress(message.text)
            self.reply_pacer.mark()
        self.query_one(SpeedPanel).show_live(message.live)
        self.query_one(KVPanel).show_live(message.live.kv_used)

    @dropped_after_exit
    async def on_turn_finished(self, message: TurnFinished) -> None:
        record = message.record
        await self.query_one(Transcript).finish_reply(record)
        self.query_one(SpeedPanel).show_turn(record)
        self.query_one(KVPanel).show_turn(record, message.view)
        self.query_one(TokensPanel).show_turn(message.view, record.reuse_broken_at, record.probs)
        self.query_one(QuantPanel).show_kv_used(record.kv_used)
        self.branches_ui.turn_finished(record)
        if error := record.extra.get("server_error"):  # the reply so far is kept, marked stopped
            self.notify(str(error), title="Server", severity="error", timeout=10, markup=False)
        self.attachments_ui.show()  # sized again for this turn (max_tokens may have changed)
        self._turn_over()

    @dropped_after_exit
    async def on_turn_failed(self, message: TurnFailed) -> None:
        await self.query_one(Transcript).fail_reply(message.error, message.refused)
        composer = self.query_one(Composer)
        if message.refused and message.user_text and not composer.text.strip():
            composer.load_text(message.user_text)
            composer.move_cursor(composer.document.end)
        self.notify(message.error, severity="error", timeout=8, markup=False)
        self.branches_ui.turn_failed(message.refused)
        self._turn_over()

    def _turn_over(self) -> None:
        self.generating = False
        self.query_one(AppHeader).status = ""
        self._prefill_ahead()  # what was typed while the reply was written

    # --- stopping and quitting ---------------------------------------------------------------
    def action_stop(self) -> None:
        self.typing_prefill.stop()
        if self.generating:
            self.engine.stop()
            self.query_one(AppHeader).status = "stopping…"
        elif not self.branches_ui.cancel():
            self.attachments_ui.stop()

    def action_interrupt(self) -> None:
        if self.generating or self.attaching:
            self.action_stop()
            return
        selected = self.query_one(Composer).selected_text
        if selected and self.focused is self.query_one(Composer):
            self.copy_to_clipboard(selected)
            return
        now = time.monotonic()
        if self._quit_armed_at is not None and now - self._quit_armed_at <= QUIT_WINDOW:
            self._quit_at = now
            self.attachments_ui.stop()
            self.exit()
            return
        self._quit_armed_at = now
        self.notify("Press Ctrl+C again within 2 s to quit (or Ctrl+Q).", title="Quit?", timeout=QUIT_WINDOW)

    async def action_quit(self) -> None:
        self._quit_at = time.monotonic()
        self.typing_prefill.stop()
        self.engine.stop()
        self.attachments_ui.stop()
        self.exit()

    @property
    def engine(self) -> Engine:
        """The engine now in use (the gate's)."""
        return self.gate.engine

    @engine.setter
    def engine(self, engine: Engine) -> None:
        self.gate.engine = engine

    def show_attachments(self) -> None:
        self.attachments_ui.show()

    def release_engine(self, timeout: float | None = None) -> list[str]:
        """After the app has exited: stop any turn, wait for its worker, save the open session,
        close the engine. Returns what went wrong saving, in words, for the terminal. Once only.

        A worker that is still running after `timeout` (by default what is left of QUIT_WAIT
        since the quit key; one llama.cpp call cannot be interrupted, and tokenizing an 8 MiB
        attachment is one call) is left to the process's exit: the engine it uses is not saved
        from or closed under it, and the line returned says so."""
        if timeout is None:
            spent = 0.0 if self._quit_at is None else time.monotonic() - self._quit_at
            timeout = max(QUIT_WAIT - spent, MIN_QUIT_WAIT)
        self.typing_prefill.stop()
        problems = self.gate.release(lambda engine: self.sessions_ui.save_on_quit(), timeout)
        if self.gate.abandoned:
            live = self.sessions_ui.live
            kept = f"; session {live.name} keeps what its last save held" if live is not None else ""
            problems.append(f"quit without waiting for a job still running in the model{kept}")
        return problems

    def run(self, **kwargs: Any) -> None:
        """App.run on an event loop of this app's own, closed without joining the thread workers.

        App.run uses asyncio.run, which ends by joining every thread of the default executor,
        where Textual runs thread workers: a worker stuck in llama.cpp or in a file kept the
        process, and a blank terminal, for as long as it ran (18 minutes in one report).
        release_engine decides how long to wait instead, and chatapp.commands.tui ends the
        process without waiting for a worker still running after that."""
        loop = asyncio.new_event_loop()
        try:
            return super().run(loop=loop, **kwargs)
        finally:
            close_loop(loop)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action in ("interrupt", "sessions", "detach") and isinstance(self.screen, ModalScreen):
            return False  # Ctrl+C in a dialog copies, as it does in any input; F6 is the dialog's
        if action == "stop":
            return True if self.generating or self.attaching or self.branches_ui.pending else None
        return True

    # --- conversation actions ------------------------------------------------------------------
    async def action_new_chat(self) -> None:
        if self.busy("start a new chat"):
            return
        self.typing_prefill.stop()
        self.engine.new_chat()
        self.branches_ui.cancel()
        await self.query_one(Transcript).clear()
        self.query_one(KVPanel).reset()
        self.query_one(TokensPanel).reset()
        self.attachments_ui.show()  # a new chat starts without attachments
        self._prefill_ahead()  # for the new conversation
        left = self.sessions_ui.detach()
        if left is None:
            self.notify("New chat", timeout=2)
        else:
            self.notify(f"New chat, not saved: session {left} keeps its transcript (F6 saves this one)",
                        timeout=5, markup=False)

    def action_regenerate(self) -> None:
        if not self.busy("regenerate") and not self.sessions_ui.changed_elsewhere():
            self.branches_ui.regenerate()

    def action_branch(self, action: BranchAction) -> None:
        """The branch actions (chatapp.ui.branch_control): select, edit, continue, switch, tree, delete, fork."""
        self.branches_ui.act(action)

    @dropped_after_exit
    async def on_branch_changed(self, message: BranchChanged) -> None:
        await self.branches_ui.changed(message)

    @dropped_after_exit
    def on_tree_ready(self, message: TreeReady) -> None:
        self.branches_ui.tree_ready(message)

    def action_system_prompt(self) -> None:
        def apply(text: str | None) -> None:
            if text is None or self.busy("change the system prompt"):
                return
            changed = text != self.engine.system_prompt
            self.engine.set_system_prompt(text)
            line = "System prompt set" if text else "System prompt cleared"
            if changed and any(m.role == "user" for m in self.engine.context_messages()):
                line += "; the next turn prefills the conversation again (the cache starts with the old one)"
            self.notify(line, timeout=5)

        self.push_screen(SystemPromptScreen(self.engine.system_prompt), apply)

    def action_sampling(self) -> None:
        def apply(result: Sampling | None) -> None:
            if result is not None:
                self.engine.set_generation(temperature=result.temperature, max_tokens=result.max_tokens)
                self.notify(f"temperature {result.temperature:g}, max tokens {result.max_tokens:,}", timeout=3)

        generation = self.engine.generation
        self.push_screen(SamplingScreen(Sampling(generation.temperature, generation.max_tokens)), apply)

    def action_toggle_drafting(self) -> None:
        """Drafting on or off from the next reply (a reply being written keeps how it started)."""
        state = self.engine.set_drafting("off" if self.engine.drafting.mode != "off" else "ngram")
        self.notify(state.describe(), title="Drafting", severity="warning" if state.off_because else "information",
                    timeout=6 if state.off_because else 3, markup=False)

    def action_copy_reply(self) -> None:
        replies = [m.content for m in self.engine.messages if m.role == "assistant"]
        if not replies:
            self.notify("no reply to copy yet", severity="warning")
            return
        self.copy_to_clipboard(replies[-1])
        self.notify(f"Copied the last reply ({len(replies[-1]):,} characters)", timeout=3)

    def action_help(self) -> None:
        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen([("In the composer", Composer.BINDINGS), ("Anywhere", self.BINDINGS),
                                         ("In the Tokens panel (or click a token)", TokensPanel.BINDINGS),
                                         ("In the attention view (F9)", AttentionScreen.BINDINGS),
                                         ("In the sessions list (F6)", SessionsScreen.BINDINGS),
                                         ("In the conversation tree (Alt+T)", TreeScreen.BINDINGS)]))

    # --- sessions, attachments, inside the model: their controllers do the work ----------------
    def action_sessions(self) -> None:
        self.sessions_ui.show_list()

    def action_save_session(self) -> None:
        self.sessions_ui.ask_save_as()

    def on_sessions_screen_request(self, message: SessionsScreen.Request) -> None:
        message.stop()
        self.typing_prefill.stop()
        self.sessions_ui.request(message.action, message.session, message.new_name, message.origin)

    @dropped_after_exit
    async def on_session_opened(self, message: SessionOpened) -> None:
        await self.sessions_ui.opened(message)
        self._prefill_ahead()  # for the conversation just opened

    @dropped_after_exit
    def on_session_failed(self, message: SessionFailed) -> None:
        self.sessions_ui.failed(message)

    @dropped_after_exit
    def on_session_saved(self, message: SessionSaved) -> None:
        self.sessions_ui.saved(message)

    def action_attach_file(self) -> None:
        self.attachments_ui.pick_file()

    def action_detach(self) -> None:
        self.attachments_ui.pick_detach()

    @dropped_after_exit
    async def on_attached(self, message: Attached) -> None:
        await self.attachments_ui.attached(message)

    @dropped_after_exit
    def on_attach_failed(self, message: AttachFailed) -> None:
        self.attachments_ui.attach_failed(message)

    @dropped_after_exit
    async def on_turn_retrieved(self, message: TurnRetrieved) -> None:
        await self.attachments_ui.retrieved(message)

    def on_composer_path_candidates(self, message: Composer.PathCandidates) -> None:
        self.attachments_ui.path_candidates(message)

    def action_anatomy(self) -> None:
        self.inside_ui.toggle_anatomy()

    def action_attention(self) -> None:
        self.inside_ui.toggle_attention()

    def on_tokens_panel_alternative_chosen(self, message: TokensPanel.AlternativeChosen) -> None:
        message.stop()
        if not self.sessions_ui.changed_elsewhere():
            self.branches_ui.branch_from_token(message.back, message.token)

    def on_tokens_panel_token_selected(self, message: TokensPanel.TokenSelected) -> None:
        message.stop()
        self.inside_ui.token_selected(message)

    @dropped_after_exit
    def on_neighbours_found(self, message: NeighboursFound) -> None:
        self.inside_ui.found(message)

    # --- panels ------------------------------------------------------------------------------
    def action_toggle_panels(self) -> None:
        self._panels_shown = not self.query_one("#main").has_class("-panels")
        self._apply_layout()

    def action_next_panel(self) -> None:
        if not self.query_one("#main").has_class("-panels"):
            self._panels_shown = True
            self._apply_layout()
        self.query_one(Tabs).action_next_tab()

    @on(Tabs.TabActivated, "#panel-tabs")
    def _panel_chosen(self, event: Tabs.TabActivated) -> None:
        chosen = event.tab.id.removeprefix("tab-") if event.tab and event.tab.id else PANELS[0]
        for key in PANELS:
            panel = self.query_one(f"#{key}")
            panel.set_class(key == chosen, "-current")
            if key == chosen:
                self.query_one("#panel-stack").scroll_to_widget(panel, animate=False)

    def action_toggle_token_ids(self) -> None:
        self.query_one(TokensPanel).toggle_ids()

    def action_toggle_confidence(self) -> None:
        """The engine computes each reply token's probabilities only while the view is on."""
        tokens = self.query_one(TokensPanel)
        on = not tokens.confidence
        self.engine.set_generation(logprobs=VIEW_CANDIDATES if on else 0)
        tokens.confidence = on
        self.query_one(Transcript).show_confidence(on)
        self.notify("confidence view on: replies from now on are shaded by probability; select a reply token in "
                    "the Tokens panel for its alternatives" if on else "confidence view off", timeout=4)

    # --- composer tokens ---------------------------------------------------------------------
    @on(TextArea.Changed, "#composer")
    def _composer_changed(self, event: TextArea.Changed) -> None:
        if self._tokenize_timer is not None:
            self._tokenize_timer.stop()
        # The composer owns the timer, so it cannot fire after the composer has gone.
        self._tokenize_timer = event.text_area.set_timer(TOKENIZE_DELAY, self._tokenize_composer)

    def _tokenize_composer(self) -> None:
        text = self.query_one(Composer).text
        if text:
            self.tokenize(text)
        else:
            self.query_one(TokensPanel).show_composer([])
        self._prefill_ahead(edited=True)

    def _prefill_ahead(self, edited: bool = False) -> None:
        """Prefill the next prompt for the composer's text. When an edit emptied the composer,
        what was prefilled for its text goes (the cache keeps the conversation)."""
        text = self.query_one(Composer).text
        if not text:
            self.query_one(SpeedPanel).show_typing(None)
            if not edited:
                return
        self.typing_prefill.start(text)

    @dropped_after_exit
    def on_typing_prefilled(self, message: TypingPrefilled) -> None:
        if message.text.strip() and message.text == self.query_one(Composer).text and not self.generating:
            self.query_one(SpeedPanel).show_typing(message.state)

    @work(thread=True, exclusive=True, exit_on_error=False, group="tokenize")
    def tokenize(self, text: str) -> None:
        with self.gate.tokenizing() as engine:
            if engine is not None:
                self.post_message(ComposerTokenized(text, engine.tokenize(text)))

    @dropped_after_exit
    def on_composer_tokenized(self, message: ComposerTokenized) -> None:
        if message.text == self.query_one(Composer).text:
            self.query_one(TokensPanel).show_composer(message.tokens)

    # --- model info and switching --------------------------------------------------------------
    @work(thread=True, exclusive=True, exit_on_error=False, group="model-info")
    def scan_model(self, path: Path) -> None:
        from chatapp.engine.models.quant import model_info  # gguf/numpy load off the UI thread

        try:
            self.post_message(ModelInfoReady(str(path), model_info(path)))
        except (OSError, ValueError) as exc:
            self.post_message(ModelInfoReady(str(path), None, f"cannot scan {path.name}: {exc}"))

    @dropped_after_exit
    def on_model_info_ready(self, message: ModelInfoReady) -> None:
        summary = self.engine.summary
        if message.path != summary.local_file:
            return  # a scan for a model that has since been replaced
        if message.info is None:
            self.notify(message.error, title="Quant", severity="warning", markup=False)
            return
        self.query_one(QuantPanel).show_info(message.info, summary)

    def action_switch_model(self) -> None:
        if self.busy("switch model"):
            return
        if self._opener is None:
            self.notify("this chat was opened on one model and cannot switch", severity="warning", markup=False)
            return
        if self.engine.summary.kind != "in-process":
            self.notify(f"{self.engine.summary.location} serves the model it was started with; restart it "
                        "with another -m to switch", severity="warning", markup=False)
            return
        self.query_one(AppHeader).status = "finding models…"
        self.find_models()

    @work(thread=True, exclusive=True, exit_on_error=False, group="model-list")
    def find_models(self) -> None:
        """Every store is read and every header looked at (cached per file) off the UI thread."""
        from chatapp.engine.machine.model_fit import model_rows

        try:
            rows, notes = model_rows(self.settings)
        except (ChatappError, OSError) as exc:
            self.post_message(ModelsFound([], [], error=str(exc)))
            return
        self.post_message(ModelsFound(rows, notes))

    @dropped_after_exit
    def on_models_found(self, message: ModelsFound) -> None:
        self.query_one(AppHeader).status = ""
        if message.error is not None:
            self.notify(f"cannot list models: {message.error}", severity="error", markup=False)
            return
        current = Path(self.engine.summary.path)
        rows = message.rows
        if not any(row.path and Path(row.path).resolve() == current.resolve() for row in rows):
            # Loaded from elsewhere (--model PATH, $CHATAPP_MODEL): list it too.
            rows.insert(0, ModelRow(current.name, "local", str(current), None, 0, None, None, None))
        self.push_screen(ModelPickerScreen(rows, current, message.notes), self._model_chosen)

    def _model_chosen(self, spec: str | None) -> None:
        if spec is None or self.busy("switch model"):
            return
        self.typing_prefill.stop()
        if Path(spec).resolve() == Path(self.engine.summary.path).resolve():
            self.notify("that model is already loaded", timeout=3)
            return
        self.loading_model = True
        self.query_one(AppHeader).status = f"loading {Path(spec).name}…"
        self.load_model(spec)

    @work(thread=True, exclusive=True, exit_on_error=False, group="model")
    def load_model(self, spec: str) -> None:
        try:
            engine = self._opener(self.settings, spec)
            # Sized (and chunked) again with the new model's tokenizer and context, here off the UI thread.
            engine.set_attachments(plan.attachment for plan in self.engine.attachments)
        except ChatappError as exc:
            self.post_message(ModelSwitchFailed(exc.one_line(), spec))
            return
        self.post_message(ModelSwitched(engine))

    @dropped_after_exit
    def on_model_switched(self, message: ModelSwitched) -> None:
        old, new = self.engine, message.engine
        new.generation = old.generation
        drafting = new.set_drafting(old.drafting.mode, old.drafting.draft_max)
        if drafting.off_because and not old.drafting.off_because:
            self.notify(drafting.describe(), title="Drafting", severity="warning", timeout=8, markup=False)
        new.load_conversation(old.transcript(), old.window_start, old.leaf)
        self.engine = new
        self.sessions_ui.moved_to(new)  # the session goes on with the new model, saved from the next turn
        self.close_engine(old)
        self.loading_model = False
        self.query_one(AppHeader).status = ""
        self.query_one(KVPanel).reset()
        self._show_model()
        self.attachments_ui.show()
        self._tokenize_composer()
        self.notify(f"Loaded {new.summary.name}", timeout=3, markup=False)

    @dropped_after_exit
    def on_model_switch_failed(self, message: ModelSwitchFailed) -> None:
        self.loading_model = False
        self.query_one(AppHeader).status = ""
        self.notify(message.error, severity="error", timeout=10, markup=False)

    @work(thread=True, exit_on_error=False, group="close")
    def close_engine(self, engine: Engine) -> None:
        self.gate.close(engine)

    # --- themes --------------------------------------------------------------------------------
    def action_change_theme(self) -> None:
        """The theme list previews each theme as it is highlighted; Esc puts the old one back."""
        self._theme_before_preview = self.theme
        self.push_screen(CommandPalette(providers=[ThemePicker],
                                        placeholder="Search for themes… (moving previews; Esc restores)"))

    @on(CommandPalette.OptionHighlighted)
    def _preview_theme(self, event: CommandPalette.OptionHighlighted) -> None:
        if self._theme_before_preview is None:
            return
        hit = getattr(event.highlighted_event.option, "hit", None)
        name = getattr(hit, "text", None)
        if name in self.theme_result.names():
            self.theme = name

    @on(CommandPalette.Closed)
    def _end_preview(self, event: CommandPalette.Closed) -> None:
        before, self._theme_before_preview = self._theme_before_preview, None
        if before is None:
            return
        if not event.option_selected:
            self.theme = before
        elif self.theme != before:
            self._remember_theme(self.theme)

    def _remember_theme(self, name: str) -> None:
        """A theme picked in the app is the next start's theme too."""
        try:
            path = save_setting("theme", name)
        except ConfigError as exc:
            self.notify(f"theme not saved: {exc}", title="Theme", severity="warning", timeout=8, markup=False)
            return
        self.notify(f"{name} saved as the theme in {path}", title="Theme", timeout=4, markup=False)
