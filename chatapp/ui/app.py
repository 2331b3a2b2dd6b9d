"""The chat App: layout, key bindings, thin thread workers around the engine, message handlers.

The App owns what the screen shows (attributes down, messages up): the model, the status, the
session, the attachments, the shown branch's figures (chatapp.ui.shown), the live turn, the
composer's tokens. Header and panels `data_bind` these and draw in their watchers, so an action
that changes the shown branch sets one attribute and every panel follows. llama.cpp never runs
on the UI thread: each worker calls headless engine code and only posts messages
(chatapp.ui.messages). Sessions, attachments, branches, the model and the look inside it each
have a controller that works through the narrow `ChatHost` (chatapp.ui.host), never a widget.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from textual import on
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.command import CommandPalette
from textual.containers import Horizontal
from textual.events import Resize
from textual.reactive import var
from textual.screen import ModalScreen
from textual.widget import Widget
from textual.widgets import Footer, TextArea

from chatapp.config import Settings
from chatapp.engine.chat.engine import Engine, ModelSummary
from chatapp.engine.chat.typeahead import TypeAhead
from chatapp.engine.events import PrefillDone, PrefillProgress
from chatapp.engine.retrieval.context import RetrievedContext
from chatapp.engine.sessions import SessionManager
from chatapp.engine.stats import LiveDecode
from chatapp.engine.tokens import Token
from chatapp.ui.controllers.attachments import AttachController, command_of
from chatapp.ui.controllers.branches import BranchAction, BranchController
from chatapp.ui.controllers.confidence import ConfidenceController
from chatapp.ui.controllers.quitting import QuitController
from chatapp.ui.commands import ChatCommands
from chatapp.ui.event_loop import close_loop
from chatapp.ui.host import EngineGate
from chatapp.ui.controllers.inside import InsideController, NeighboursFound
from chatapp.ui.key_bursts import KeyBurstApp
from chatapp.ui.keys import APP_BINDINGS, footer_key, help_sections
from chatapp.ui.controllers.models import ModelController, Opener
from chatapp.ui.pacing import UpdatePacer
from chatapp.ui.messages import (
    AttachFailed, Attached, BranchChanged, ComposerTokenized, ImageAttached, ModelInfoReady, ModelSwitched,
    ModelSwitchFailed, ReplyScored, SessionFailed, SessionOpened, SessionSaved, TreeReady, TurnRetrieved,
    dropped_after_exit)
from chatapp.ui.screens.help import HelpScreen
from chatapp.ui.screens.model_picker import ModelsFound
from chatapp.ui.screens.sessions import SessionsScreen
from chatapp.ui.controllers.sessions import SessionController
from chatapp.ui.shown import Selection, Shown, ShownBranch, fresh
from chatapp.ui.slash import as_message, slash_action, unknown_command
from chatapp.ui.controllers.presets import PresetController
from chatapp.ui.controllers.settings import SettingsController
from chatapp.ui.controllers.theme_picker import ThemeController
from chatapp.ui.controllers.tools import ToolController
from chatapp.ui.turn_messages import TurnMessages
from chatapp.ui.themes import DEFAULT_THEME, ThemeLoadResult, load_themes, register_themes
from chatapp.ui.controllers.turns import SEND, TurnHow, answer_now, run_turn
from chatapp.ui.controllers.typing_prefill import TypingPrefill, TypingPrefilled
from chatapp.ui.widgets.composer import Composer
from chatapp.ui.widgets.confidence import AlternativeChosen
from chatapp.ui.widgets.header import AppHeader
from chatapp.ui.widgets.kv_panel import KVPanel
from chatapp.ui.widgets.panel_deck import PanelDeck
from chatapp.ui.widgets.quant_panel import QuantPanel
from chatapp.ui.widgets.speed_panel import SpeedPanel
from chatapp.ui.widgets.tokens_panel import TokensPanel
from chatapp.ui.widgets.transcript import Transcript

if TYPE_CHECKING:
    from chatapp.engine.inside.neighbours import Neighbour
    from chatapp.engine.models.quant import ModelInfo
    from chatapp.engine.sampling import TokenProbs

WIDE_AT = 120
"""Terminal columns from which the panels sit beside the transcript instead of below it."""


class ChatApp(TurnMessages, KeyBurstApp[None]):
    CSS_PATH = Path(__file__).with_name("app.tcss")
    TITLE = "chatapp"
    COMMANDS = App.COMMANDS | {ChatCommands}
    AUTO_FOCUS = "#composer"

    BINDINGS = APP_BINDINGS

    generating: var[bool] = var(False, bindings=True)
    """A turn's worker is running: the composer still works, but Enter waits."""
    loading_model: var[bool] = var(False, bindings=True)
    session_busy: var[bool] = var(False, bindings=True)
    """A session worker is opening, starting or saving a session."""
    attaching: var[bool] = var(False, bindings=True)
    """An attach worker is reading and sizing a file (chatapp.ui.controllers.attachments)."""

    # --- what the screen shows: the header and the panels are bound to these ---------------------
    model: var[ModelSummary | None] = var(None)
    model_info: var[ModelInfo | None] = var(None)
    """The loaded file's tensor scan (chatapp.ui.controllers.models), None until done."""
    status: var[str] = var("")
    """What the app is doing: "", "prefill…", "generating…", "loading model…"."""
    session_name: var[str | None] = var(None)
    preset_name: var[str | None] = var(None)
    """The preset the chat runs with (chatapp.presets), in the header; None: none."""
    reply_shape: var[str | None] = var(None)
    """The shape every reply must have, in words (chatapp.ui.screens.reply_shape); None: free text."""
    attached: var[tuple[str, ...]] = var(())
    branch: var[ShownBranch] = var(ShownBranch)
    """The shown branch's cache: set after every action that changes the shown leaf."""
    live_cells: var[int | None] = var(None)
    """Cells in use while a turn runs; None between turns (the branch's figures say then)."""
    live_reply: var[str | None] = var(None)
    """The running turn's reply (its thought, then its answer) as far as it has streamed; None between turns."""
    live_tokens: var[tuple[Token, ...]] = var(())
    """That reply's tokens as the cache holds them (none where the backend cannot say while it streams)."""
    prefill_progress: var[PrefillProgress | None] = var(None)
    prefill_done: var[PrefillDone | None] = var(None)
    decode: var[LiveDecode | None] = var(None)
    thought_decode: var[LiveDecode | None] = var(None)
    """The running turn's decode as its thought last stood (a thinking model's): the Speed
    panel splits the live decode into thinking and answer from it."""
    typed_ahead: var[TypeAhead | None] = var(None)
    """Prefill while typing, for the composer's text now (chatapp.ui.controllers.typing_prefill)."""
    composer_tokens: var[tuple[Token, ...]] = var(())
    confidence: var[bool] = var(False)
    """The confidence view: reply tokens shaded by probability, their alternatives in the Tokens panel."""
    neighbours: var[tuple[int, list[Neighbour] | None, str | None] | None] = var(None)

    def __init__(self, engine: Engine, *, settings: Settings | None = None, session: str | None = None,
                 themes: ThemeLoadResult | None = None, sessions: SessionManager | None = None,
                 system_prompt: str | None = None, opener: Opener | None = None,
                 preset: str | None = None) -> None:
        """`system_prompt`: one given on the command line, which replaces the system prompt of
        the session opened at start (the engine's settings start a new chat with it already).
        `opener(settings, spec)` opens another model for the model switch (Ctrl+L); without one
        the app keeps the model it was given. `preset`: the preset `settings` came from (--preset,
        or the model's default), shown in the header."""
        self._preset_at_start = preset
        self.gate = EngineGate(engine)
        """The engine and its locks: every worker that uses the engine goes through it."""
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
        self.reply_pacer = UpdatePacer()
        """Holds back reply text updates when the screen is costly to lay out (chatapp.ui.pacing)."""
        self._panels_shown: bool | None = None
        """None follows the width (shown when wide); F2 makes it the user's choice."""
        self.sessions_ui = SessionController(self, sessions, system_prompt)
        self.attachments_ui = AttachController(self)
        self.inside_ui = InsideController(self)
        self.branches_ui = BranchController(self, self.sessions_ui)
        self.sessions_ui.jump = self.branches_ui.jump  # a search hit in this chat: a switch of branch
        self.confidence_ui = ConfidenceController(self, self.sessions_ui)
        self.models_ui = ModelController(self, opener, self.sessions_ui)
        self.themes_ui = ThemeController(self)
        self.settings_ui = SettingsController(self, self.sessions_ui)
        self.presets_ui = PresetController(self, self.sessions_ui,
                                           choose_tools=lambda choice: self.tools_ui.choose(choice, by_user=True))
        self.tools_ui = ToolController(self, keep=lambda choice: self.sessions_ui.keep_choice(tools=choice))
        self.typing_prefill = TypingPrefill(self)
        """Prefills the next prompt while it is typed (chatapp.ui.controllers.typing_prefill)."""
        self.quitting = QuitController(self, self.sessions_ui, lambda: (
            self.typing_prefill.stop(), self.attachments_ui.stop(), self.tools_ui.close()))
        # The widgets the app composes, kept (never looked up): only the app draws into them.
        self._transcript = Transcript(id="transcript")
        self._thought_so_far = ""  # the running turn's thought, which live_reply's answer follows
        self._composer = Composer(id="composer")
        self._tokens = TokensPanel(id="tokens", classes="panel -current")
        self._panels: dict[str, Widget] = {"tokens": self._tokens, "kv": KVPanel(id="kv", classes="panel"),
                                           "speed": SpeedPanel(id="speed", classes="panel"),
                                           "quant": QuantPanel(id="quant", classes="panel")}
        self._main = Horizontal(id="main")
        self._panels_deck = PanelDeck(self._panels, id="panels")

    def typing_target(self) -> Composer | None:
        """The composer, when printable keys may go straight to it (chatapp.ui.key_bursts):
        focused, editable, on the main screen."""
        focused = self.focused
        if isinstance(focused, Composer) and not focused.read_only and len(self.screen_stack) == 1:
            return focused
        return None

    def get_theme_variable_defaults(self) -> dict[str, str]:
        return self.theme_result.variable_defaults()

    # --- layout ----------------------------------------------------------------------------
    def compose(self) -> ComposeResult:
        app = ChatApp
        yield AppHeader(id="header", incognito=self.settings.incognito).data_bind(
            summary=app.model, session=app.session_name, attachments=app.attached, status=app.status,
            preset=app.preset_name, shape=app.reply_shape)
        with self._main:
            yield self._transcript.data_bind(app.confidence)
            self._tokens.data_bind(app.branch, app.composer_tokens, app.confidence, app.neighbours, app.live_reply,
                                   app.live_tokens, app.prefill_done, app.decode)
            self._panels["kv"].data_bind(app.branch, app.live_cells, app.model)
            self._panels["speed"].data_bind(app.branch, app.prefill_progress, app.prefill_done, app.decode,
                                            app.thought_decode, app.model, typing=app.typed_ahead)
            self._panels["quant"].data_bind(app.model, app.model_info, app.branch)
            yield self._panels_deck
        yield self._composer
        yield Footer()

    def get_key_display(self, binding: Binding) -> str:
        return binding.key_display or footer_key(super().get_key_display(binding))

    def on_mount(self) -> None:
        self.session_name = self.session
        self.preset_name = self._preset_at_start
        self.models_ui.show_loaded()
        self._apply_layout()
        for failure in self.theme_result.failures:
            self.notify(f"skipped theme file {failure}", title="Theme", severity="warning", timeout=10, markup=False)
        for notice in getattr(self.engine, "load_notices", []):
            self.notify(notice, title="Model", severity="warning", timeout=10, markup=False)
        if self._theme_problem:
            self.notify(f"theme {self._theme_problem!r} is not available; using {DEFAULT_THEME}",
                        title="Theme", severity="warning", timeout=10, markup=False)
        self.sessions_ui.at_start(self.session)
        self.tools_ui.at_start()
        self.presets_ui.at_start(self._preset_at_start)
        # Focus is never lost: when the focused widget goes (a popup removed after a choice, a
        # message redrawn), typing goes back to the composer instead of nowhere.
        self.watch(self.screen, "focused", self._focus_kept, init=False)

    def _focus_kept(self, focused: Widget | None) -> None:
        if focused is None:
            self.call_after_refresh(self._refocus)

    def _refocus(self) -> None:
        if len(self.screen_stack) == 1 and self.screen.focused is None and self._composer.is_attached:
            self._composer.focus()

    def on_resize(self, event: Resize) -> None:
        self._apply_layout(event.size.width)  # self.size is updated after this handler runs

    def _apply_layout(self, width: int | None = None) -> None:
        wide = (self.size.width if width is None else width) >= WIDE_AT
        self._main.set_class(wide, "-wide")
        self._main.set_class(wide if self._panels_shown is None else self._panels_shown, "-panels")

    # --- what controllers may ask of the screen (chatapp.ui.host.ChatHost) -------------------------
    async def show_path(self, path: list[Shown], dropped: int = 0, select: int | None = None, *,
                        anew: bool = False) -> None:
        if anew:
            await self._transcript.clear(greet=not path)
        await self._transcript.show_path(path, dropped)
        drawn = self._transcript.messages()
        if select is not None and 0 <= select < len(drawn):
            self._transcript.select(drawn[select])

    async def add_notice(self, line: str, kind: str = "info") -> None:
        await self._transcript.add_notice(line, kind)

    async def show_sources(self, context: RetrievedContext) -> None:
        await self._transcript.show_sources(context)

    def selection(self) -> Selection | None:
        return self._transcript.selection()

    def step_selection(self, step: int) -> None:
        self._transcript.select_step(step)

    def edit_text(self, text: str, *, only_if_empty: bool = False) -> None:
        composer = self._composer
        if only_if_empty and composer.text.strip():
            return
        composer.load_text(text)
        composer.move_cursor(composer.document.end)
        composer.focus()

    def focus_composer(self) -> None:
        self._composer.focus()

    def clear_composer(self) -> None:
        self._composer.action_clear_all()

    def show_alternatives(self, message_id: str) -> bool:
        return self._transcript.pick(message_id)

    def show_probs(self, message_id: str, probs: tuple[TokenProbs, ...]) -> None:
        self._transcript.show_probs(message_id, probs)

    def mark_composer(self, line: str | None) -> None:
        self._composer.border_title = line
        self._composer.set_class(line is not None, "-branching")

    def show_attachments(self) -> None:
        self.attachments_ui.show()

    @property
    def composer_text(self) -> str:
        return self._composer.text

    def retokenize(self) -> None:
        self.typing_prefill.tokenize_composer()

    # --- sending ---------------------------------------------------------------------------
    @on(Composer.Submitted)
    def _submit(self, message: Composer.Submitted) -> None:
        sent = time.perf_counter()  # the record's ttft_ms counts from here
        self.typing_prefill.stop()
        if command_of(message.text) is not None:
            if self.attachments_ui.composer_command(message.text):
                message.composer.clear()
            return
        if (action := slash_action(message.text)) is not None:  # a peer's command: the app's own action
            message.composer.clear()
            self.call_next(self.run_action, action)
            return
        if (refused := unknown_command(message.text)) is not None:  # never sent; the text stays
            self.notify(refused, severity="warning")
            return
        if self.busy("send") or self.sessions_ui.changed_elsewhere():
            return
        message.composer.clear()
        how = self.branches_ui.take_pending()
        if how.action == "send":  # the images attached since the last question go with this one
            how = replace(how, images=self.attachments_ui.images_for_next_question())
        self.start_turn(as_message(message.text), how, since=sent)

    def start_turn(self, text: str, how: TurnHow = SEND, since: float | None = None) -> None:
        """Run a turn: a new question at the end, or one that branches (chatapp.ui.controllers.branches).
        `since`: when Enter was pressed (time.perf_counter()), for the record's ttft_ms."""
        self.typing_prefill.stop()
        self.generating = True
        self.status = "prefill…"
        keep = None if self.settings.incognito else self.sessions_ui.keep_chat  # every chat is kept
        self.run_worker(partial(run_turn, self.gate, self.post_message, text, how, since, self.sessions_ui.live,
                                self.sessions_ui.autosave, keep, self.tools_ui.turns_for),
                        name="turn", group="turn", thread=True, exclusive=True, exit_on_error=False)

    def busy(self, what: str) -> bool:
        """True (and say so) when a reply is being written or a model is loading."""
        for running, doing in ((self.generating, "a reply is being written: Esc stops it"),
                               (self.loading_model, "a model loads"),
                               (self.session_busy, "a session is opened or saved"),
                               (self.attaching, "a file is being attached")):
            if running:
                self.notify(f"cannot {what} while {doing}", severity="warning")
                return True
        return False

    def action_tool_choice(self, choice: str) -> None:
        self.tools_ui.choose(choice, by_user=True)

    def action_tools_allowed(self, revoke: str = "") -> None:
        self.tools_ui.allowed_action(revoke)

    def action_think(self, mode: str) -> None:
        self.settings_ui.think(mode)

    def action_thinking_history(self, history: str) -> None:
        self.settings_ui.thinking_history(history)

    def action_answer_now(self) -> None:
        answer_now(self.gate) or self.notify("No thought is being written: nothing to stop", timeout=3)

    def action_think_more(self) -> None:
        self.branches_ui.think_more()

    # --- stopping and quitting ---------------------------------------------------------------
    def action_stop(self) -> None:
        self.typing_prefill.stop()
        if self.generating:
            self.engine.stop()
            self.status = "stopping…"
        elif not self.branches_ui.cancel():
            self.attachments_ui.stop()

    def action_interrupt(self) -> None:
        if self.generating or self.attaching:
            self.action_stop()
            return
        selected = self._composer.selected_text
        if selected and self.focused is self._composer:
            self.copy_to_clipboard(selected)
            return
        self.quitting.pressed_twice()

    def action_quit(self) -> None:
        self.quitting.quit()  # asks first when unsent text no session keeps would go

    @property
    def engine(self) -> Engine:
        """The engine now in use (the gate's)."""
        return self.gate.engine

    def release_engine(self, timeout: float | None = None) -> list[str]:
        """After the app has exited: the open session saved, the engine closed, within a bounded
        wait (chatapp.ui.controllers.quitting). What went wrong saving, in words. Once only."""
        return self.quitting.release_engine(timeout)

    def run(self, **kwargs: Any) -> None:
        """App.run on an event loop of this app's own, closed without joining the thread workers:
        asyncio.run joins them, and a worker stuck in llama.cpp kept the process and a blank
        terminal for as long as it ran (18 minutes in one report). release_engine decides how
        long to wait instead; chatapp.commands.tui then ends the process."""
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
        self.sessions_ui.keep_draft()  # what was typed and not sent stays with the chat left
        self.engine.new_chat()
        self.branches_ui.cancel()
        await self._transcript.clear()
        self.branch = fresh(self.engine.branch_figures())  # no leaf: nothing is tokenized here
        self.attachments_ui.show()  # a new chat starts without attachments
        self.typing_prefill.ahead()  # for the new conversation
        left = self.sessions_ui.detach()
        kept = f"; session {left} keeps the last one (F6)" if left is not None else ""
        self.notify(f"New chat{kept}", timeout=4, markup=False)

    def action_regenerate(self) -> None:
        if not self.busy("regenerate") and not self.sessions_ui.changed_elsewhere():
            self.branches_ui.regenerate()

    def action_branch(self, action: BranchAction) -> None:
        """The branch actions (chatapp.ui.controllers.branches): select, edit, continue, switch, tree, delete, fork."""
        self.branches_ui.act(action)

    @dropped_after_exit
    async def on_branch_changed(self, message: BranchChanged) -> None:
        await self.branches_ui.changed(message)

    @dropped_after_exit
    def on_tree_ready(self, message: TreeReady) -> None:
        self.branches_ui.tree_ready(message)

    def action_system_prompt(self) -> None:
        self.settings_ui.system_prompt()

    def action_sampling(self, typed: str = "") -> None:
        self.settings_ui.sampling(typed)

    def action_reply_shape(self, typed: str = "") -> None:
        self.settings_ui.reply_shape(typed)

    def action_preset(self, name: str) -> None:
        self.presets_ui.switch(name)

    def action_toggle_drafting(self) -> None:
        self.settings_ui.toggle_drafting()

    def action_copy_reply(self) -> None:
        replies = [m.content for m in self.engine.messages if m.role == "assistant"]
        if not replies:
            self.notify("no reply to copy yet", severity="warning")
            return
        self.copy_to_clipboard(replies[-1])
        self.notify(f"Copied the last reply ({len(replies[-1]):,} characters)", timeout=3)

    def action_help(self) -> None:
        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen(help_sections()))

    # --- sessions, attachments, the model, inside the model: their controllers do the work ----------
    def action_sessions(self) -> None:
        self.sessions_ui.show_list()

    def action_save_session(self) -> None:
        self.sessions_ui.ask_save_as()

    def on_sessions_screen_request(self, message: SessionsScreen.Request) -> None:
        message.stop()
        self.typing_prefill.stop()
        self.sessions_ui.request(message.action, message.session, message.new_name, message.origin, message.hit)

    @dropped_after_exit
    async def on_session_opened(self, message: SessionOpened) -> None:
        await self.sessions_ui.opened(message)
        if message.choices.tools and message.choices.tools != self.tools_ui.choice:  # as the session was left
            self.tools_ui.choose(message.choices.tools)
        if message.choices.preset and message.choices.preset != self.preset_name:
            self.presets_ui.switch(message.choices.preset, because=f"as session {message.live.name} was left")
        self.typing_prefill.ahead()  # for the conversation just opened

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
    async def on_image_attached(self, message: ImageAttached) -> None:
        await self.attachments_ui.image_attached(message)

    def on_attach_failed(self, message: AttachFailed) -> None:
        self.attachments_ui.attach_failed(message)

    @dropped_after_exit
    async def on_turn_retrieved(self, message: TurnRetrieved) -> None:
        await self.attachments_ui.retrieved(message)

    def on_composer_path_candidates(self, message: Composer.PathCandidates) -> None:
        self.attachments_ui.path_candidates(message.candidates)

    def action_switch_model(self) -> None:
        self.typing_prefill.stop()
        self.models_ui.ask()

    @dropped_after_exit
    def on_models_found(self, message: ModelsFound) -> None:
        self.models_ui.found(message)

    @dropped_after_exit
    def on_model_switched(self, message: ModelSwitched) -> None:
        self.models_ui.switched(message)
        if message.default_preset and message.default_preset != self.preset_name:  # as --model does at start
            self.presets_ui.switch(message.default_preset, because="the default of this model")

    @dropped_after_exit
    def on_model_switch_failed(self, message: ModelSwitchFailed) -> None:
        self.models_ui.switch_failed(message)

    @dropped_after_exit
    def on_model_info_ready(self, message: ModelInfoReady) -> None:
        self.models_ui.info_ready(message)

    def action_anatomy(self) -> None:
        self.inside_ui.toggle_anatomy()

    def action_attention(self, view: str = "attention") -> None:
        self.inside_ui.open_view(view, self._tokens.selected_reply_position())

    def action_compare_quant(self) -> None:
        self.models_ui.ask("compare")

    def compare_quant(self, spec: str | None) -> None:
        if spec is not None:
            self.inside_ui.open_quant_cost(spec)

    def on_transcript_clicked(self, message: Transcript.Clicked) -> None:
        self._composer.focus()

    def on_transcript_sibling_clicked(self, message: Transcript.SiblingClicked) -> None:
        self.branches_ui.sibling_at(message.index, message.step)

    def on_alternative_chosen(self, message: AlternativeChosen) -> None:
        self._composer.focus()  # the popup that had the keys is gone
        if not self.sessions_ui.changed_elsewhere():
            self.branches_ui.branch_at(message.message_id, message.step, message.token)

    async def on_transcript_action_clicked(self, message: Transcript.ActionClicked) -> None:
        await self.run_action(message.action)

    def on_tokens_panel_token_selected(self, message: TokensPanel.TokenSelected) -> None:
        message.stop()
        self.inside_ui.token_selected(message.token.id)

    @dropped_after_exit
    def on_neighbours_found(self, message: NeighboursFound) -> None:
        self.inside_ui.found(message)

    # --- panels ------------------------------------------------------------------------------
    def action_toggle_panels(self) -> None:
        self._panels_shown = not self._main.has_class("-panels")
        self._apply_layout()

    def action_next_panel(self) -> None:
        if not self._main.has_class("-panels"):
            self._panels_shown = True
            self._apply_layout()
        self._panels_deck.next_panel()

    def action_toggle_token_ids(self) -> None:
        self._tokens.toggle_ids()

    def action_toggle_confidence(self) -> None:
        self.confidence_ui.toggle()

    def action_token_probs(self) -> None:
        self.confidence_ui.token_probs()

    def action_score_reply(self) -> None:
        self.confidence_ui.score()

    @dropped_after_exit
    def on_reply_scored(self, message: ReplyScored) -> None:
        self.confidence_ui.scored(message)

    # --- the composer's text before Enter: its tokens, and prefill while typing ----------------------
    @on(TextArea.Changed, "#composer")
    def _composer_changed(self, event: TextArea.Changed) -> None:
        self.typing_prefill.changed(event.text_area)

    @dropped_after_exit
    def on_typing_prefilled(self, message: TypingPrefilled) -> None:
        self.typing_prefill.prefilled(message)

    @dropped_after_exit
    def on_composer_tokenized(self, message: ComposerTokenized) -> None:
        self.typing_prefill.tokenized(message)

    # --- themes --------------------------------------------------------------------------------
    def action_change_theme(self) -> None:
        self.themes_ui.pick()

    @on(CommandPalette.OptionHighlighted)
    def _preview_theme(self, event: CommandPalette.OptionHighlighted) -> None:
        self.themes_ui.preview(event)

    @on(CommandPalette.Closed)
    def _end_preview(self, event: CommandPalette.Closed) -> None:
        self.themes_ui.closed(event)
