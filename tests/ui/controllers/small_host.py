"""The small host App the controller tests run a controller on, instead of ChatApp.

The controllers need only `ChatHost` (chatapp.ui.host) and, some of them, a few members more
(BranchHost, ConfidenceHost, ModelHost, ThemeHost, TypingHost): `Host` has all of them, keeps what the
controller sets as plain attributes, and draws the transcript and the composer it keeps itself
(no controller ever sees them). It passes the messages the controllers' workers post back to
`self.controller`, as ChatApp's handlers do (after oterm's widget tests)."""

from __future__ import annotations

from collections.abc import Callable

from textual.app import App, ComposeResult

from chatapp.config import Settings
from chatapp.ui.controllers.inside import NeighboursFound
from chatapp.ui.controllers.typing_prefill import TypingPrefilled
from chatapp.ui.host import ChatHost, EngineGate
from chatapp.ui.messages import (
    AttachFailed, Attached, BranchChanged, ComposerTokenized, ModelInfoReady, ReplyScored, SessionFailed,
    SessionOpened, SessionSaved)
from chatapp.ui.shown import ShownBranch
from chatapp.ui.themes import DEFAULT_THEME, register_themes
from chatapp.ui.widgets.composer import Composer
from chatapp.ui.widgets.transcript import Transcript

SETTINGS = Settings().replace(n_ctx=2048, temperature=0.0, max_tokens=16)


class NoSessions:
    """A SessionKeeper with no open session (what the app has without --session)."""

    live = None

    def request(self, action, name, new_name=None, screen=None) -> None:
        raise AssertionError(f"no session action expected, got {action} {name}")

    def save_after_change(self, live) -> None:
        raise AssertionError("nothing to save: no session is open")

    def keep_scores(self, live, message_id, probs) -> None:
        raise AssertionError("nothing to keep scores in: no session is open")

    def moved_to(self, engine) -> None:
        pass

    def keep_choice(self, **chosen: str) -> None:
        pass  # nothing to keep them in: no session is open


class Host(App[None]):
    """The least a controller needs: ChatHost's members (and its sub-protocols'), drawn into a
    transcript and a composer this host keeps. `controller(host)` makes the controller under test."""

    def __init__(self, engine, controller: Callable[[Host], object] | None = None, settings: Settings = SETTINGS,
                 theme_result=None) -> None:
        self.theme_result = theme_result
        """The themes, registered at mount when given (the dialogs' frames use their colours)."""
        super().__init__()
        self.gate = EngineGate(engine)
        self.settings = settings
        self.session_busy = False
        self.attaching = False
        self.generating = False
        self.loading_model = False
        self.status = ""
        self.session_name = None
        self.preset_name = None
        self.reply_shape = None
        self.attached = ()
        self.branch = ShownBranch()
        self.neighbours = None
        self.model = None
        self.model_info = None
        self.composer_tokens = ()
        self.typed_ahead = None
        self.busy_with: list[str] = []
        self.shown = 0
        self.started: list[tuple] = []
        """The turns a controller asked for (start_turn), which this host does not run."""
        self.retokenized = 0
        self.compared: list[str | None] = []
        self.confidence = False
        self.transcript, self.composer = Transcript(), Composer()
        self.controller = controller(self) if controller is not None else None

    @property
    def engine(self):
        return self.gate.engine

    @property
    def composer_text(self) -> str:
        return self.composer.text

    def busy(self, what: str) -> bool:
        self.busy_with.append(what)
        return False

    def show_attachments(self) -> None:
        self.shown += 1

    async def show_path(self, path, dropped=0, select=None, *, anew=False) -> None:
        await self.transcript.show_path(path, dropped)

    async def add_notice(self, line: str, kind: str = "info") -> None:
        await self.transcript.add_notice(line, kind)

    async def show_sources(self, context) -> None:
        await self.transcript.show_sources(context)

    def selection(self):
        return self.transcript.selection()

    def step_selection(self, step: int) -> None:
        self.transcript.select_step(step)

    def edit_text(self, text: str, *, only_if_empty: bool = False) -> None:
        if not (only_if_empty and self.composer.text.strip()):
            self.composer.load_text(text)

    def focus_composer(self) -> None:
        self.composer.focus()

    def clear_composer(self) -> None:
        self.composer.action_clear_all()

    def mark_composer(self, line) -> None:
        self.composer.border_title = line

    def show_alternatives(self, message_id: str) -> bool:
        return self.transcript.pick(message_id)

    def show_probs(self, message_id: str, probs) -> None:
        self.transcript.show_probs(message_id, probs)

    def start_turn(self, text: str, how=None) -> None:
        self.started.append((text, how))

    def retokenize(self) -> None:
        self.retokenized += 1

    def compare_quant(self, spec: str | None) -> None:
        self.compared.append(spec)

    def compose(self) -> ComposeResult:
        yield self.transcript
        yield self.composer

    def get_theme_variable_defaults(self) -> dict[str, str]:
        if self.theme_result is None:
            return super().get_theme_variable_defaults()
        return self.theme_result.variable_defaults()

    def on_mount(self) -> None:
        if self.theme_result is not None:
            register_themes(self, self.theme_result)
            self.theme = DEFAULT_THEME

    # --- what the controllers' workers post, passed back to the controller as ChatApp does ---------
    @property
    def _controller(self):
        """The controller under test, which every message below is for: a host without one (a
        turn's messages, say) must get none of them."""
        assert self.controller is not None, "a message for a controller, and this host has none"
        return self.controller

    def on_attached(self, message: Attached) -> None:
        self.run_worker(self._controller.attached(message))

    def on_attach_failed(self, message: AttachFailed) -> None:
        self._controller.attach_failed(message)

    async def on_branch_changed(self, message: BranchChanged) -> None:
        await self._controller.changed(message)

    async def on_session_opened(self, message: SessionOpened) -> None:
        await self._controller.opened(message)

    def on_session_failed(self, message: SessionFailed) -> None:
        self._controller.failed(message)

    def on_session_saved(self, message: SessionSaved) -> None:
        self._controller.saved(message)

    def on_model_info_ready(self, message: ModelInfoReady) -> None:
        self._controller.info_ready(message)

    def on_neighbours_found(self, message: NeighboursFound) -> None:
        self._controller.found(message)

    def on_composer_tokenized(self, message: ComposerTokenized) -> None:
        self._controller.tokenized(message)

    def on_typing_prefilled(self, message: TypingPrefilled) -> None:
        self._controller.prefilled(message)

    def on_reply_scored(self, message: ReplyScored) -> None:
        self._controller.scored(message)


def host_members() -> set[str]:
    declared = {name for name in vars(ChatHost) if not name.startswith("_")}
    return declared | set(ChatHost.__annotations__)


def lacks(host: object, protocol: type = ChatHost) -> set[str]:
    """The members of `protocol` that `host` does not have, read without calling any property."""
    members = {name for name in vars(protocol) if not name.startswith("_")} | set(protocol.__annotations__)
    return {name for name in members if name not in dir(type(host)) and name not in vars(host)}
