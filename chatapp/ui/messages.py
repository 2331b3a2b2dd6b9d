"""Messages that UI workers post; the App turns them into what it shows. Workers never touch widgets.

A message that changes the shown branch carries the engine's `BranchFigures` for the leaf shown
after it, read on the worker while it holds the engine, so the App never asks the engine from the
UI thread and every panel gets the same figures (chatapp.ui.shown)."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import TYPE_CHECKING

from textual.css.query import NoMatches
from textual.message import Message

from chatapp.engine.events import ContextTrimmed, PrefillDone, PrefillProgress
from chatapp.engine.retrieval.attachments import AttachReport
from chatapp.engine.retrieval.context import RetrievedContext
from chatapp.engine.events import PromptToken
from chatapp.engine.stats import LiveDecode, TurnRecord
from chatapp.engine.tokens import Token
from chatapp.engine.sessions.choices import SessionChoices

if TYPE_CHECKING:
    from chatapp.engine.chat.branch_states import BranchFigures, BranchSwitch
    from chatapp.engine.images import ImageFacts
    from chatapp.engine.chat.engine import Engine
    from chatapp.engine.models.quant import ModelInfo
    from chatapp.engine.sampling import Scored
    from chatapp.engine.sessions import LiveSession
    from chatapp.errors import SessionConflict
    from chatapp.ui.shown import TreeSnapshot
    from chatapp.ui.shown import Shown


def dropped_after_exit(handler: Callable) -> Callable:
    """For a handler of a worker's message: one that lands while the app shuts down, when its
    widgets are already gone, is dropped instead of failing (with a traceback) in a query.
    A NoMatches while the app still runs is a bug and still raises."""

    @functools.wraps(handler)
    async def handle(app, message: Message) -> None:
        if not app.is_running:
            return
        try:
            result = handler(app, message)
            if inspect.isawaitable(result):
                await result
        except NoMatches:
            if app.is_running:
                raise

    return handle


class TurnStarted(Message):
    def __init__(self, user_text: str, regenerate: bool = False, path: "list[Shown] | None" = None,
                 dropped: int = 0, images: int = 0) -> None:
        super().__init__()
        self.user_text = user_text
        self.images = images
        """A new question's images (the transcript notes them under it)."""
        self.regenerate = regenerate
        self.path = path
        """For a turn that branches (an edit, a regenerate, a question after an earlier reply): the
        path it continues, up to its question, which the transcript draws before the reply."""
        self.dropped = dropped


class BranchChanged(Message):
    """A switch of branch, a jump from the tree or a delete changed the shown path
    (chatapp.ui.controllers.branches); or a branching turn was refused and the path is the one before."""

    def __init__(self, path: "list[Shown]", dropped: int, figures: "BranchFigures", line: str = "",
                 switch: "BranchSwitch | None" = None, select: int | None = None) -> None:
        super().__init__()
        self.path = path
        self.figures = figures
        """The engine's figures for the leaf now shown, read on the worker after the change."""
        self.dropped = dropped
        """How many of the path's first messages are outside the context window."""
        self.line = line
        """What it did, in words (a switch: BranchSwitch.describe())."""
        self.switch = switch
        self.select = select
        """The place in the path of the message to select after it (the one switched), if any."""


class TreeReady(Message):
    """The conversation tree, read on a worker for the tree screen (Alt+T)."""

    def __init__(self, snapshot: "TreeSnapshot") -> None:
        super().__init__()
        self.snapshot = snapshot


class TurnTrimmed(Message):
    """The full-context policy dropped old turns before this one."""

    def __init__(self, event: ContextTrimmed) -> None:
        super().__init__()
        self.event = event


class TurnRetrieved(Message):
    """The turn placed attachment text before the question (shown under the user's message)."""

    def __init__(self, context: RetrievedContext) -> None:
        super().__init__()
        self.context = context


class Attached(Message):
    """An attach worker read and sized a file or folder."""

    def __init__(self, path: str, report: AttachReport) -> None:
        super().__init__()
        self.path = path
        self.report = report


class ImageAttached(Message):
    """An attach worker gave an image to the engine (read, to be encoded by the next question's turn)."""

    def __init__(self, path: str, facts: "ImageFacts") -> None:
        super().__init__()
        self.path = path
        self.facts = facts


class AttachFailed(Message):
    """Nothing was attached; `error` says why in one line (`stopped`: the user stopped it)."""

    def __init__(self, path: str, error: str, *, stopped: bool = False) -> None:
        super().__init__()
        self.path = path
        self.error = error
        self.stopped = stopped


class PrefillProgressed(Message):
    """A prefill chunk finished: tokens done of total. A newer one replaces an unprocessed older one."""

    def __init__(self, event: PrefillProgress) -> None:
        super().__init__()
        self.event = event

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, PrefillProgressed)


class PrefillFinished(Message):
    def __init__(self, event: PrefillDone) -> None:
        super().__init__()
        self.event = event


class ReplyProgress(Message):
    """The reply so far, and its tokens as the cache holds them (thought included; empty where
    the backend cannot say while it streams). A newer one replaces an unprocessed older one, so
    a slow UI coalesces updates instead of falling behind decode."""

    def __init__(self, text: str, live: LiveDecode, tokens: tuple[Token, ...] = ()) -> None:
        super().__init__()
        self.text = text
        self.live = live
        self.tokens = tokens

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, ReplyProgress)


class ThoughtProgress(Message):
    """A thinking model's thought so far, its tokens, and the decode's live figures as it stood
    (the Speed panel's thinking line); coalesced as ReplyProgress is."""

    def __init__(self, text: str, tokens: int, live: LiveDecode | None = None,
                 pieces: tuple[Token, ...] = ()) -> None:
        super().__init__()
        self.text = text
        self.tokens = tokens
        self.live = live
        self.pieces = pieces
        """The reply's tokens so far, as ReplyProgress.tokens."""

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, ThoughtProgress)


class TurnFinished(Message):
    def __init__(self, record: TurnRecord, view: list[PromptToken], figures: "BranchFigures",
                 path: "tuple[list[Shown], int] | None" = None, more: bool = False) -> None:
        super().__init__()
        self.record = record
        self.view = view
        self.figures = figures
        """The engine's figures for the leaf the turn wrote, read on the worker after it."""
        self.path = path
        """A tool loop's step: the path and its dropped count, drawn whole (calls and results
        as their own messages, each with its id) instead of the streamed reply."""
        self.more = more
        """A tool loop's step whose calls go back to the model: the worker runs on (ToolStep)."""


class ToolStep(Message):
    """A tool loop's call has run (or was refused): its result, to draw; or, with none, the
    loop's next step starts (chatapp.ui.controllers.tools)."""

    def __init__(self, result: str | None = None, note: str = "") -> None:
        super().__init__()
        self.result = result
        self.note = note


class TurnFailed(Message):
    def __init__(self, error: str, user_text: str, refused: bool = False,
                 figures: "BranchFigures | None" = None) -> None:
        super().__init__()
        self.error = error
        self.user_text = user_text
        self.refused = refused
        """True when the engine took the message back (e.g. context full): the composer gets it again."""
        self.figures = figures
        """The shown leaf's figures after the failure, when the engine could still give them."""


class ReplyScored(Message):
    """A reply written without probabilities, scored after the fact (chatapp.ui.controllers.confidence)."""

    def __init__(self, message_id: str, scored: "Scored | None", error: str = "", show: bool = False) -> None:
        super().__init__()
        self.message_id = message_id
        self.scored = scored
        """Its probabilities and what reading it back cost; None when it failed (`error` says why)."""
        self.error = error
        self.show = show
        """Show a token's alternatives once it is shaded (it was asked for from Alt+P)."""


class ComposerTokenized(Message):
    def __init__(self, text: str, tokens: list[Token]) -> None:
        super().__init__()
        self.text = text
        self.tokens = tokens

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, ComposerTokenized)


class ModelInfoReady(Message):
    """The GGUF scan for the Quant panel finished (info is None when it failed)."""

    def __init__(self, path: str, info: "ModelInfo | None", error: str = "") -> None:
        super().__init__()
        self.path = path
        self.info = info
        self.error = error


class ModelSwitched(Message):
    """A new engine loaded in a worker; the app swaps it in and closes the old one."""

    def __init__(self, engine: "Engine", figures: "BranchFigures", default_preset: str = "") -> None:
        super().__init__()
        self.engine = engine
        self.figures = figures
        """The new engine's figures for the shown leaf, the conversation loaded into it."""
        self.default_preset = default_preset
        """The preset that names this model as its default ("" for none; chatapp.presets)."""


class ModelSwitchFailed(Message):
    def __init__(self, error: str, spec: str) -> None:
        super().__init__()
        self.error = error
        self.spec = spec


class SessionOpened(Message):
    """A session worker resumed, created or saved a session; from now on the app autosaves into it."""

    def __init__(self, live: "LiveSession", figures: "BranchFigures", *, replaced: bool,
                 notices: list[str] | None = None, other_model: str | None = None, forked: bool = False,
                 kept: bool = False, draft: str = "", choices: SessionChoices | None = None) -> None:
        super().__init__()
        self.live = live
        self.draft = draft
        self.choices = choices or SessionChoices()
        """The thinking mode, earlier thoughts' keeping and tool choice the session was left with
        (none chosen: the app's hold)."""
        """What was typed in the session and not sent when it was left (its draft), for the composer."""
        self.kept = kept
        """A chat no session held became one at its first turn (the turn runs on meanwhile)."""
        self.figures = figures
        """The engine's figures for the session's shown leaf, read on the worker once it was opened."""
        self.forked = forked
        """The shown path of the chat was forked into this new session."""
        self.replaced = replaced
        """True when the conversation was replaced (open, new): the transcript is rebuilt from the chat."""
        self.notices = notices or []
        """Problems that didn't stop it, e.g. a KV state that could not be written."""
        self.other_model = other_model
        """The model the session was saved with, when that isn't the loaded one."""


class SessionFailed(Message):
    def __init__(self, error: str) -> None:
        super().__init__()
        self.error = error


class SessionSaved(Message):
    """An autosave finished: notices are warnings (the transcript is saved), error means nothing was."""

    def __init__(self, name: str, notices: list[str], error: str | None = None,
                 conflict: SessionConflict | None = None) -> None:
        super().__init__()
        self.name = name
        self.notices = notices
        self.error = error
        self.conflict = conflict
        """Set when another process changed (or removed: SessionRemoved) the session."""
