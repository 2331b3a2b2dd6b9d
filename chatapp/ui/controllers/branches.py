"""The app's side of conversation trees: selecting a message, editing a question, regenerating a
reply or continuing after it, switching between siblings, the tree screen, deleting a branch
and forking the path into a new session.

The engine owns the tree and decides what each change costs (chatapp.engine.chat.engine): this
controller only asks. A switch, a jump or a delete runs in a thread worker holding the turn
lock, posts `BranchChanged` with the path to draw, then saves the session (the active leaf
changed). An edit, a regenerate and a question after an earlier reply are turns: the app's
turn worker runs them (`TurnHow`), and `turn_finished` names the new messages and says in the
KV and Tokens panels what the turn kept and prefilled.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Literal, Protocol

from textual.binding import Binding

from chatapp.engine.chat.branch_states import BranchSwitch
from chatapp.engine.chat.engine import Engine
from chatapp.engine.stats import TurnRecord
from chatapp.errors import ChatappError, InputError
from chatapp.format import count
from chatapp.ui.host import ChatHost, SessionKeeper
from chatapp.ui.messages import BranchChanged, TreeReady
from chatapp.ui.controllers.turns import SEND, TurnHow
from chatapp.ui.screens.sessions import ConfirmScreen, NameScreen
from chatapp.ui.screens.tree import TreeScreen
from chatapp.ui.shown import Selection, TreeSnapshot, index_in, shown_path

BranchAction = Literal["select_previous", "select_next", "edit", "continue_here", "previous_sibling",
                       "next_sibling", "tree", "delete", "fork"]

BINDINGS = [
    Binding("alt+up", "branch('select_previous')", "Select ↑", show=False,
            tooltip="Select the message before (the last one when none is selected); a click selects too"),
    Binding("alt+down", "branch('select_next')", "Select ↓", show=False, tooltip="Select the message after"),
    Binding("alt+e", "branch('edit')", "Edit", show=False,
            tooltip="Edit the selected question: its text goes to the composer; sending asks it anew "
                    "beside the old one (Esc cancels)"),
    Binding("alt+c", "branch('continue_here')", "Continue here", show=False,
            tooltip="Continue from the selected reply: the next question branches after it (Esc cancels)"),
    Binding("alt+left", "branch('previous_sibling')", "‹ Branch", show=False,
            tooltip="Previous sibling ‹ n/m › of the selected message (else of the last that has any)"),
    Binding("alt+right", "branch('next_sibling')", "Branch ›", show=False,
            tooltip="Next sibling ‹ n/m › of the selected message (else of the last that has any)"),
    Binding("alt+t", "branch('tree')", "Tree", show=False,
            tooltip="The conversation as a tree: every branch, its tokens and whether its KV state is kept; "
                    "Enter jumps there"),
    Binding("alt+d", "branch('delete')", "Delete branch", show=False,
            tooltip="Delete the selected message and everything after it (asks first)"),
    # Not Alt+F: tmux and xterm send it as ESC f, which Textual reads as Ctrl+Right (iTerm's word jump).
    Binding("alt+n", "branch('fork')", "Fork", show=False,
            tooltip="Fork the shown path into a new session (only this path; saved after every turn)"),
]
"""The app's branch keys (alt+ so that they work while the composer has focus)."""

COMMANDS: tuple[tuple[str, str, str], ...] = (
    ("Select previous message", "Select a message for the branch actions (Alt+Up)", "branch('select_previous')"),
    ("Select next message", "Alt+Down", "branch('select_next')"),
    ("Edit selected question or tool result", "Ask it again in other words, or give a tool call another "
     "result for the model to answer; the old branch stays (Alt+E)", "branch('edit')"),
    ("Continue from selected reply", "The next question branches after it (Alt+C)", "branch('continue_here')"),
    ("Previous branch ‹", "Show the previous sibling of the selected message (Alt+Left)",
     "branch('previous_sibling')"),
    ("Next branch ›", "Show the next sibling of the selected message (Alt+Right)", "branch('next_sibling')"),
    ("Conversation tree", "Every branch, its tokens and kept KV state; jump to any (Alt+T)", "branch('tree')"),
    ("Delete branch", "Delete the selected message and everything after it (Alt+D)", "branch('delete')"),
    ("Fork path into a new session", "Only the shown path, saved under a new name (Alt+N)", "branch('fork')"),
)
"""(title, help, app action) for the command palette."""


def editing_line(role: str, message_id: str) -> str:
    """What the composer says while an edit waits for Enter."""
    if role == "tool":
        return (f"editing tool result {message_id}: Enter gives the call this result instead, beside the old one, "
                "and the model answers it (Esc cancels)")
    return f"editing question {message_id}: Enter asks it anew beside the old one (Esc cancels)"


UP_TO = {"edit": "up to your edit", "regenerate": "up to the question", "branch": "up to the branch point",
         "token": "up to the token chosen", "think": "up to the thought's end"}

THINK_MORE = 256
"""Thought tokens that think more adds when neither the think_more setting nor the session's
thinking budget says."""


def turn_cost(record: TurnRecord, action: str | None = None) -> str | None:
    """What a branching turn kept and prefilled: "kept 1,204 tokens up to your edit; prefilled 38".
    `action`: the UI's own (a reply branched at a token is the engine's regenerate)."""
    action = action or ("think" if record.extra.get("think_more") else record.extra.get("action"))
    if action not in UP_TO:
        return None
    branch = record.extra.get("branch")
    where = f" (branch {branch})" if branch else ""
    return (f"kept {count(record.cached_tokens)} tokens {UP_TO[action]}; "
            f"prefilled {count(record.prefill_tokens)}{where}")


def tree_snapshot(engine: Engine, on_disk: Callable[[str], bool] | None = None) -> TreeSnapshot:
    """The tree for the tree screen, with each leaf's tokens (its path's prompt, tokenized here,
    on the worker) and where its KV state is kept. `on_disk(leaf)`: the session keeps a file."""
    tree = engine.tree
    kept = engine.kept_leaves()
    tokens = {}
    for leaf in tree.leaves():
        tokens[leaf] = engine.branch_tokens(leaf)
        if leaf not in kept and on_disk is not None and on_disk(leaf):
            kept[leaf] = "disk"
    return TreeSnapshot(tree, tokens, kept)


class BranchHost(ChatHost, Protocol):
    """What the branch controller needs of the app beyond ChatHost: starting a turn."""

    def start_turn(self, text: str, how: TurnHow = SEND) -> None: ...


class BranchController:
    def __init__(self, app: BranchHost, sessions: SessionKeeper) -> None:
        self.app = app
        self.sessions = sessions
        self.pending: TurnHow | None = None
        """An edit or a continue-from-here waiting for the composer's text."""
        self.taken: TurnHow = SEND
        """How the turn running now was asked for, until it ends."""

    def _selected(self, role: str | tuple[str, ...] | None = None, what: str = "") -> Selection | None:
        """The selected message; None, and say why, when there is none or it is not of `role`
        (one role, or any of several)."""
        chosen = self.app.selection()
        if chosen is None:
            self.app.notify(f"select a message to {what} first (Alt+Up, or click it)", severity="warning")
            return None
        roles = (role,) if isinstance(role, str) else role
        if roles is not None and chosen.role not in roles:
            kinds = " or ".join({"user": "a question", "tool": "a tool's result"}.get(r, "a reply") for r in roles)
            self.app.notify(f"only {kinds} can be chosen to {what}", severity="warning")
            return None
        return chosen

    # --- the actions -----------------------------------------------------------------------------
    def act(self, action: BranchAction) -> None:
        getattr(self, action)()

    def select_previous(self) -> None:
        self.app.step_selection(-1)

    def select_next(self) -> None:
        self.app.step_selection(+1)

    def edit(self) -> None:
        """Alt+E: the selected question, or tool result, into the composer; Enter sends it beside
        the old one (a result: as the call's result, and the model answers it anew)."""
        chosen = self._selected(("user", "tool"), "edit")
        if chosen is None or self.app.busy("edit a message"):
            return
        text = next(m.content for m in self.app.engine.messages if m.id == chosen.message_id)
        self.app.edit_text(text)
        self._set_pending(TurnHow("edit", chosen.message_id), editing_line(chosen.role, chosen.message_id))

    def continue_here(self) -> None:
        chosen = self._selected("assistant", "continue from")
        if chosen is None:
            return
        self.app.focus_composer()
        self._set_pending(TurnHow("branch", chosen.message_id),
                          f"the next question branches after reply {chosen.message_id} (Esc cancels)")

    def _set_pending(self, how: TurnHow | None, line: str = "") -> None:
        self.pending = how
        self.app.mark_composer(line if how is not None else None)
        if line:
            self.app.notify(line, timeout=4, markup=False)

    def cancel(self) -> bool:
        """Esc: forget a pending edit or continue-from-here. True when there was one."""
        if self.pending is None:
            return False
        self._set_pending(None)
        self.app.notify("branch cancelled: Enter sends after the shown path again", timeout=3)
        return True

    def take_pending(self) -> TurnHow:
        """How the composer's text is sent: the pending branch (then forgotten), or at the end."""
        how = self.taken = self.pending or SEND
        if self.pending is not None:
            self._set_pending(None)
        return how

    def turn_failed(self, refused: bool) -> None:
        """A turn the engine refused gives its text back to the composer: an edit or a
        continue-from-here it was goes back to waiting for it."""
        if refused and self.taken.action in ("edit", "branch") and self.taken.target in self.app.engine.tree:
            target = self.taken.target
            line = (editing_line(self.app.engine.tree[target].role, target) if self.taken.action == "edit"
                    else f"the next question branches after reply {target} (Esc cancels)")
            self._set_pending(self.taken, line)
        self.taken = SEND

    def regenerate(self) -> None:
        """Ctrl+R: a new reply beside the selected reply, or beside the last one; the old one stays."""
        if self.app.busy("regenerate"):
            return
        chosen = self.app.selection()
        target = chosen.message_id if chosen is not None and chosen.role == "assistant" else None
        messages = self.app.engine.messages
        if not any(m.role == "user" for m in messages):
            self.app.notify("nothing to regenerate yet", severity="warning")
            return
        if target is not None:
            index = next(i for i, m in enumerate(messages) if m.id == target)
            question = next(m.content for m in reversed(messages[:index]) if m.role == "user")
        else:
            question = next(m.content for m in reversed(messages) if m.role == "user")
        self.app.start_turn(question, TurnHow("regenerate", target))

    def think_more(self) -> None:
        """Ctrl+F: beside the selected reply (else the last), the same thought gone on with for the
        think_more setting's tokens (else the session's thinking budget, else THINK_MORE), then a
        new answer (Engine.think_more)."""
        if self.app.busy("think more"):
            return
        chosen = self.app.selection()
        messages = self.app.engine.messages
        target = chosen.message_id if chosen is not None and chosen.role == "assistant" else None
        index = next((i for i, m in enumerate(messages) if m.id == target), None) if target else None
        if index is None:
            index = next((i for i in range(len(messages) - 1, -1, -1) if messages[i].role == "assistant"), None)
        if index is None or not messages[index].thinking:
            self.app.notify("No thought to go on with: think more takes a thinking model's reply", timeout=4)
            return
        question = next(m.content for m in reversed(messages[:index]) if m.role == "user")
        extra = self.app.settings.think_more or self.app.engine.thinking.budget or THINK_MORE
        self.app.start_turn(question, TurnHow("think", messages[index].id, step=extra))

    def branch_at(self, message_id: str, step: int, token: int) -> None:
        """A candidate chosen in the confidence view (next to a reply's token, or in the Tokens
        panel): a new reply beside reply `message_id`, the same up to its `step`-th token with
        probabilities, then `token`, decoded on from there."""
        if self.app.busy("branch the reply"):
            return
        messages = self.app.engine.messages
        index = next((i for i, m in enumerate(messages) if m.id == message_id and m.role == "assistant"), None)
        if index is None:
            self.app.notify(f"reply {message_id or '?'} is no longer shown; its alternatives are gone",
                            severity="warning", markup=False)
            return
        question = next(m.content for m in reversed(messages[:index]) if m.role == "user")
        how = self.taken = TurnHow("token", message_id, step=step, token=token)
        self.app.start_turn(question, how)

    def previous_sibling(self) -> None:
        self._sibling(-1)

    def next_sibling(self) -> None:
        self._sibling(+1)

    def sibling_at(self, index: int, step: int) -> None:
        """‹ or › clicked on the message at `index` of the path."""
        self._sibling(step, index)

    def _sibling(self, step: int, index: int | None = None) -> None:
        if index is None and (chosen := self.app.selection()) is not None:
            index = chosen.index
        if index is None:  # the last message that has siblings
            drawn, _ = shown_path(self.app.engine)
            index = next((i for i in range(len(drawn) - 1, -1, -1) if drawn[i].siblings > 1), None)
            if index is None:
                self.app.notify("no message on this path has another branch", severity="warning")
                return
        if self.app.busy("switch branches"):
            return

        def switch(engine: Engine) -> tuple[str, BranchSwitch | None, int | None]:
            path = [m for m in engine.messages if m.id]
            if index >= len(path):
                raise InputError("the conversation changed meanwhile: select the message again")
            done = engine.sibling(path[index].id, step)  # the message now at that place, however often pressed
            return done.describe(), done, index

        self._run(switch)

    def tree(self) -> None:
        if self.app.busy("show the tree"):
            return
        live = self.sessions.live

        def snapshot(engine: Engine) -> None:
            on_disk = None
            if live is not None and live.state_key:
                on_disk = lambda leaf: live.manager.state_path(live.state_key, leaf).exists()  # noqa: E731
            self.app.post_message(TreeReady(tree_snapshot(engine, on_disk)))

        self.app.run_worker(partial(self._locked, snapshot), name="branch tree", group="branch", thread=True,
                            exit_on_error=False)

    def tree_ready(self, message: TreeReady) -> None:
        if not isinstance(self.app.screen, TreeScreen):
            self.app.push_screen(TreeScreen(message.snapshot), self.jump)

    def jump(self, message_id: str | None, select: str | None = None) -> None:
        """Show the branch through `message_id` (the tree's Enter, a search hit in this chat),
        with message `select` selected on it (a hit's message)."""
        if message_id is None or self.app.busy("switch branches"):
            return

        def jump(engine: Engine) -> tuple[str, BranchSwitch | None, int | None]:
            done = engine.switch(message_id)
            path, _ = shown_path(engine)
            at = index_in(path, select)
            return done.describe(), done, at

        self._run(jump)

    def delete(self) -> None:
        chosen = self._selected(None, "delete")
        if chosen is None or self.app.busy("delete a branch"):
            return
        index, message_id = chosen.index, chosen.message_id
        after = len(self.app.engine.tree.path()) - index - 1

        def confirmed(yes: bool | None) -> None:
            if yes and not self.app.busy("delete a branch"):
                self._run(partial(self._delete, message_id))

        self.app.push_screen(ConfirmScreen(f"Delete message {message_id} and everything after it in the tree "
                                           f"({after} more on this path, and any branches below it)?"), confirmed)

    @staticmethod
    def _delete(message_id: str, engine: Engine) -> tuple[str, BranchSwitch | None, int | None]:
        removed = engine.delete_branch(message_id)
        return f"deleted {len(removed)} message{'s' if len(removed) != 1 else ''} from {message_id} on", None, None

    def fork(self) -> None:
        if not any(m.id for m in self.app.engine.messages):
            self.app.notify("nothing to fork yet", severity="warning")
            return

        def chosen(name: str | None) -> None:
            if name:
                self.sessions.request("fork", name)

        current = self.sessions.name
        self.app.push_screen(NameScreen("Fork", "Fork the shown path into a new session named:",
                                        f"{current} (fork)" if current else ""), chosen)

    # --- the worker ----------------------------------------------------------------------------------
    def _run(self, job: Callable[[Engine], tuple[str, BranchSwitch | None, int | None]]) -> None:
        self.app.run_worker(partial(self._locked, partial(self._change, job)), name="branch", group="branch",
                            thread=True, exit_on_error=False)

    def _locked(self, job: Callable[[Engine], object]) -> None:
        with self.app.gate.turn() as engine:
            if engine is not None:
                job(engine)

    def _change(self, job: Callable[[Engine], tuple[str, BranchSwitch | None, int | None]], engine: Engine) -> None:
        """On the worker, with the turn lock: change the path, post it with the engine's figures for
        the leaf now shown, then save the session."""
        live = self.sessions.live
        try:
            line, switch, select = job(engine)
        except ChatappError as exc:
            line, switch, select = exc.one_line(), None, -1
        except Exception as exc:  # noqa: BLE001 - whatever llama.cpp raises, the app says it and goes on
            line, switch, select = f"{type(exc).__name__}: {exc}", None, -1
        self.app.post_message(BranchChanged(*shown_path(engine), engine.branch_figures(), line=line, switch=switch,
                                            select=select))
        if live is not None and select != -1:
            self.sessions.save_after_change(live)

    # --- what the workers posted -----------------------------------------------------------------
    async def changed(self, message: BranchChanged) -> None:
        """Draw the path, and show the leaf's figures: every panel reads them from the app's branch."""
        refused = message.select == -1
        await self.app.show_path(message.path, message.dropped, None if refused else message.select)
        if refused:  # the path is as it was
            self.app.notify(message.line, severity="error", timeout=8, markup=False)
            return
        switch = message.switch
        self.app.branch = self.app.branch.moved(message.figures, message.line,
                                                switch.source if switch is not None and switch.how == "restored"
                                                else "")
        if message.line:
            self.app.notify(message.line, title="Branch", timeout=5, markup=False)

    def turn_note(self, record: TurnRecord) -> str:
        """What a branching turn kept and prefilled, for the panels; forgets how the turn was asked."""
        how, self.taken = self.taken, SEND
        return turn_cost(record, "token" if how.action == "token" else None) or ""
