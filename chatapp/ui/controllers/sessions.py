"""The app's side of saved sessions: resuming one at start, autosaving after every turn and on
quit, and carrying out what the sessions screen (F6) asks for.

ChatApp holds one `SessionController` (`app.sessions_ui`) and hands it the session messages
and actions. Nothing typed is lost by leaving a chat: the composer's unsent text goes with the
session it was typed in as its draft (Ctrl+N, opening another session, quitting) and comes back
when that session is opened again; a chat that no session keeps yet asks before quitting drops it.
Its work runs in the app's thread workers (group "session"), holding the app's turn lock while it
uses the engine (a resume loads the KV cache, a save reads it), and only posts messages; the app's
handlers pass them back here to update the widgets. Renaming and deleting are single SQLite
statements, so they run where they are asked for.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace
from functools import partial
from typing import TYPE_CHECKING, Literal

from chatapp.config import THINKING_HISTORIES
from chatapp.engine.chat.engine import Engine
from chatapp.engine.sampling import TokenProbs, probs_from_json
from chatapp.engine.sessions import LiveSession, SaveReport, SessionManager, validate_name
from chatapp.engine.sessions.fingerprint import model_id, same_model
from chatapp.engine.sessions.choices import SessionChoices
from chatapp.engine.sessions.store import ModelIdentity
from chatapp.engine.shape import shape_from_json
from chatapp.engine.stats import TurnRecord
from chatapp.errors import ChatappError, SessionConflict, SessionError, SessionRemoved
from chatapp.ui.messages import SessionFailed, SessionOpened, SessionSaved
from chatapp.ui.screens.session_changed import KEEP, RELOAD, SessionChangedScreen
from chatapp.engine.sessions.search import Hit
from chatapp.ui.screens.sessions import ConfirmScreen, NameScreen, SessionAction, SessionsScreen
from chatapp.ui.shown import fresh, index_in, shown_path

if TYPE_CHECKING:
    from chatapp.ui.host import ChatHost

SessionWork = Literal["open", "new", "save_as", "reload", "fork"]
"""What the session worker does; rename and delete run in place."""

STATUS: dict[SessionWork, str] = {"open": "opening session…", "new": "starting session…",
                                  "save_as": "saving session…", "reload": "reloading session…",
                                  "fork": "forking the path…"}
WHAT: dict[SessionWork, str] = {"open": "open a session", "new": "start a new session",
                                "save_as": "save this chat as a session", "reload": "reload the session",
                                "fork": "fork the path into a new session"}


def other_model(saved: ModelIdentity | None, live: LiveSession) -> str | None:
    """The model a session was saved with, when it isn't the one loaded now. Either backend
    may have saved it: the identities are compared as `fingerprint.same_model` says."""
    if saved is None or live.report.restored:  # a restored state proves it is the same model
        return None
    summary = live.engine.summary
    try:
        current = model_id(live.fingerprint)
    except (OSError, ChatappError):  # the model file or the server can't say now: go by the name
        current = ""
    if current:
        same = same_model(saved.sha256, (saved.name, saved.quant), current, (summary.name, summary.quant or ""))
    else:
        same = saved.name == summary.name
    return None if same else f"{saved.name} ({saved.quant})"


def write_draft(live: LiveSession, text: str) -> None:
    """Keep `text` as the session's draft ("" when nothing but blanks: a draft sent since goes).
    A session not written yet (named on the command line, no turn since) is written first."""
    text = text if text.strip() else ""
    store = live.manager.store
    try:
        store.set_draft(live.name, text)
    except SessionError:
        if not text:
            return
        live.save_now(force=True)
        store.set_draft(live.name, text)


class SessionController:
    """The open session (`live`) and the sessions database (`manager`) for one ChatApp."""

    def __init__(self, app: ChatHost, manager: SessionManager | None = None,
                 system_prompt: str | None = None) -> None:
        self.app = app
        self.manager = manager
        """The sessions database; opened on first use when not given."""
        self.start_system_prompt = system_prompt
        """The command line's system prompt, for the session opened at start: it replaces the
        session's own from its next turn on (None: the session keeps its own)."""
        self.live: LiveSession | None = None
        """The open session, saved after every turn and on quit; None: nothing is saved."""
        self.chosen = SessionChoices()
        """The thinking mode, how earlier thoughts are kept and the tool choice that the user chose
        (or the open session came with), kept with the session (chatapp.engine.sessions.choices)."""
        self._choices_due = False
        """`chosen` is not in the open session yet: the next save writes it (a chat kept at its
        first turn is written by that turn's save)."""
        self.jump: Callable[[str, str | None], None] | None = None
        """Switch the open chat to the branch through a message, selecting another on it (the
        branches controller's)."""
        self._select: str | None = None
        """The message a search hit opens its session at: selected once the session is shown."""

    @property
    def name(self) -> str | None:
        return self.live.name if self.live is not None else None

    # --- the session database --------------------------------------------------------------
    def _session_manager(self) -> SessionManager | None:
        """The sessions database, opened on first use; None (and say why) when it can't be."""
        if self.manager is None:
            try:
                self.manager = SessionManager.open(self.app.settings)
            except SessionError as exc:
                self.app.notify(exc.one_line(), title="Sessions", severity="error", timeout=10, markup=False)
        return self.manager

    def at_start(self, name: str | None) -> None:
        """Open the session named on the command line (`open_at_start`). Without one, open the
        sessions database on a worker while the first question is typed, so that keeping the
        chat at its first turn (`keep_chat`) does not create it between Enter and the first
        token (a new home's took 50-180 ms here). Not when incognito: nothing is kept then."""
        if name is not None:
            self.open_at_start(name)
        elif self.manager is None and not self.app.settings.incognito:
            self.app.run_worker(self._open_database, name="sessions database", group="session-database",
                                thread=True, exit_on_error=False)

    def _open_database(self) -> None:
        """On a worker. A database that cannot be opened is said by `keep_chat`, which tries again."""
        try:
            manager = SessionManager.open(self.app.settings)
        except (ChatappError, OSError):
            return
        if self.manager is None:
            self.manager = manager

    def open_at_start(self, name: str) -> None:
        """Open (or create) the session named on the command line."""
        try:
            validate_name(name)
        except SessionError as exc:
            self.app.session_name = None
            self.app.notify(exc.one_line(), severity="error", timeout=10, markup=False)
            return
        if self._session_manager() is None:
            self.app.session_name = None
            return
        self._start_work("open", name, self.start_system_prompt)

    # --- F6 and the palette ------------------------------------------------------------------
    def show_list(self) -> None:
        """F6: the sessions screen."""
        if isinstance(self.app.screen, SessionsScreen):
            return
        manager = self._session_manager()
        if manager is not None:
            self.app.push_screen(SessionsScreen(manager, self.name))

    def ask_save_as(self) -> None:
        def chosen(name: str | None) -> None:
            if name:
                self.request("save_as", name)

        self.app.push_screen(NameScreen("Save as", "Save this chat as a new session named:"), chosen)

    def request(self, action: SessionAction | SessionWork, name: str, new_name: str | None = None,
                screen: SessionsScreen | None = None, hit: Hit | None = None) -> None:
        """Carry out one sessions action, or say in one line why not. `hit`: an open comes from
        a search, and opens the session on the hit's branch (its kept KV state restored)."""
        manager = self._session_manager()
        if manager is None:
            return
        app, current = self.app, self.name
        if hit is not None and action == "open" and name == current:  # this chat: a switch of branch
            if hit.leaf is not None and not hit.active and self.jump is not None:
                self.jump(hit.leaf, hit.message_id)
            elif hit.active:  # on the branch shown: its message selected, as a hit in another session is
                path, dropped = shown_path(app.engine)
                at = index_in(path, hit.message_id)
                app.call_later(app.show_path, path, dropped, at)
            if screen is not None:
                screen.dismiss(None)
            return
        try:
            if action == "rename" or action == "delete":
                self._rename_or_delete(manager, action, name, new_name, current, screen)
                return
            if action == "open" and name == current:
                app.notify(f"session {name} is already open", timeout=3, markup=False)
            elif action != "open" and manager.store.load(validate_name(name)) is not None:
                app.notify(f"a session named {name!r} already exists", severity="error", markup=False)
                return
            elif app.busy(WHAT[action]):
                return
            else:
                if hit is not None:  # as `sessions checkout` does: the session opens on the hit's branch
                    if hit.leaf is not None and not hit.active:
                        manager.store.set_leaf(name, hit.leaf)
                    self._select = hit.message_id
                self._start_work(action, name)
        except SessionError as exc:
            app.notify(exc.one_line(), severity="error", timeout=8, markup=False)
            return
        if screen is not None:
            screen.dismiss(None)

    def _rename_or_delete(self, manager: SessionManager, action: Literal["rename", "delete"], name: str,
                          new_name: str | None, current: str | None, screen: SessionsScreen | None) -> None:
        app = self.app
        is_open = name == current
        if is_open and app.busy(f"{action} the open session"):
            return  # the turn's autosave would write under the old name
        if action == "rename":
            new_name = new_name or ""
            manager.rename(name, new_name)
            if is_open and self.live is not None:
                self.live.name = new_name
                self.app.session_name = new_name
            app.notify(f"renamed session {name} to {new_name}", timeout=3, markup=False)
        else:
            manager.delete(name)
            if is_open:
                self.live = None
                self.app.session_name = None
            app.notify(f"deleted session {name}" + ("; this chat is no longer saved" if is_open else ""),
                       timeout=5, markup=False)
        if screen is not None:
            screen.current = self.name
            screen.reload(select=new_name)

    # --- another process changed the open session ------------------------------------------------
    def changed_elsewhere(self) -> bool:
        """Call before a turn. When another process saved turns this chat doesn't hold (or removed
        the session), say so and offer to reload; True means the turn should wait. A rename in
        another process is followed."""
        live, app = self.live, self.app
        if live is None:
            return False
        before = live.name
        try:
            what = live.changed_elsewhere()
        except SessionError:
            return False  # the database can't be read now; the autosave will say what is wrong
        if live.name != before:
            self.app.session_name = live.name
            app.notify(f"session {before} was renamed to {live.name} by another process", title="Session",
                       timeout=5, markup=False)
        if what is None:
            return False
        if isinstance(what, SessionRemoved):
            self.detach()
            app.notify(f"{what.message}; this chat is no longer saved (F6 → save as keeps it)", title="Session",
                       severity="warning", timeout=10, markup=False)
            return False
        self._offer_reload(what.message)
        return True

    def _offer_reload(self, what: str, unsaved_turn: bool = False) -> None:
        app = self.app
        if isinstance(app.screen, SessionChangedScreen):
            return
        live = self.live

        def answered(choice: str | None) -> None:
            if live is None or live is not self.live:
                return  # the app moved on meanwhile (another session opened, a new chat)
            if choice == RELOAD and not app.busy(WHAT["reload"]):
                self._start_work("reload", live.name)
            elif choice == KEEP:
                left = self.detach()
                app.notify(f"this chat is no longer saved into session {left} (F6 → save as keeps it)",
                           title="Session", timeout=6, markup=False)

        app.push_screen(SessionChangedScreen(what, unsaved_turn=unsaved_turn), answered)

    # --- what was typed and not sent: the session's draft ------------------------------------------
    def keep_choice(self, **chosen: str) -> None:
        """The user chose a thinking mode (`think`), how earlier thoughts are kept (`history`) or a
        tool choice (`tools`): kept with the open session now, or with the chat's session once its
        first turn saves it."""
        self.chosen = replace(self.chosen, **chosen)
        self._choices_due = True
        if self.live is not None:
            self._write_choices(self.live, write_session=True)

    def _write_choices(self, live: LiveSession, *, write_session: bool = False) -> None:
        """Write `chosen` into the session when due. A session not written yet (named on the
        command line, no turn since) is written first with `write_session`, as a draft is;
        otherwise it waits for its first save."""
        if not self._choices_due:
            return
        store = live.manager.store
        try:
            try:
                store.set_choices(live.name, self.chosen)
            except SessionError:
                if not write_session or store.load(live.name) is not None:
                    raise
                live.save_now(force=True)
                store.set_choices(live.name, self.chosen)
        except (ChatappError, OSError) as exc:
            if write_session or store.load(live.name) is not None:
                error = exc.one_line() if isinstance(exc, ChatappError) else str(exc)
                self.app.post_message(SessionSaved(live.name, [], f"session {live.name}: choices not kept: {error}"))
            return
        self._choices_due = False

    def keep_draft(self) -> str | None:
        """Before leaving the open session (a new chat, another session): the composer's unsent
        text becomes its draft and the composer is emptied (Ctrl+Z brings the text back). Returns
        the session's name when text was kept. With no session, the text stays in the composer."""
        live, text = self.live, self.app.composer_text
        if live is None:
            return None
        try:
            write_draft(live, text)
        except (ChatappError, OSError) as exc:  # the text stays where it is, and the app says why
            self.app.notify(f"unsent text not kept with session {live.name}: {exc}", title="Session",
                            severity="warning", timeout=8, markup=False)
            return None
        if not text.strip():
            return None
        self.app.clear_composer()
        self.app.notify(f"your unsent text is kept with session {live.name}: it is back when you open it (F6)",
                        title="Session", timeout=6, markup=False)
        return live.name

    def quit_drops_text(self, quit: Callable[[], object]) -> bool:
        """Before quitting: True when text typed in a chat that no session keeps would be dropped,
        after asking whether to (`quit()` runs on yes; the quit key pressed again also quits)."""
        text = self.app.composer_text
        if self.live is not None or not text.strip():
            return False
        if isinstance(self.app.screen, ConfirmScreen):  # asked already: the key again means yes
            return False
        why = "incognito" if self.app.settings.incognito else "no turn yet"
        self.app.push_screen(ConfirmScreen(f"Quit and drop the {len(text):,} characters typed and not sent? No session "
                                           f"keeps this chat ({why}).", yes="Quit"),
                             lambda yes: quit() if yes else None)
        return True

    def detach(self) -> str | None:
        """Stop saving into the open session, leaving it as it was saved (a new chat does this
        rather than overwrite it). Returns its name, or None when none was open."""
        live, self.live = self.live, None
        if live is not None:
            self.app.session_name = None
            return live.name
        return None

    def moved_to(self, engine: Engine) -> None:
        """After a model switch: the open session goes on with `engine`, saved from the next turn."""
        if self.live is not None:
            self.live = self.live.moved_to(engine)

    # --- work on the session worker ------------------------------------------------------------
    def _start_work(self, action: SessionWork, name: str, system_prompt: str | None = None) -> None:
        app = self.app
        if action in ("open", "new"):  # another conversation: what was typed stays with this one
            self.keep_draft()
        app.session_busy = True
        self.app.status = STATUS[action]
        app.run_worker(partial(self._work, action, name, system_prompt), name=f"session {action}",
                       group="session", thread=True, exclusive=True, exit_on_error=False)

    def _work(self, action: SessionWork, name: str, system_prompt: str | None = None) -> None:
        """open: save the open session, then resume `name` into the engine (transcript and KV cache;
        `system_prompt` replaces its own when given). new: save the open session, then start
        `name` from an empty chat. save_as: keep this chat, saved from now on as `name`. fork: save
        the open session, then keep only the shown path and save it from now on as `name`. reload:
        resume the open session `name` again, as another process saved it, without saving this
        chat over it. Runs on a thread worker."""
        app, manager = self.app, self.manager
        assert manager is not None, "work starts only once the database is open"
        with app.gate.turn() as engine:
            if engine is None:
                return
            notices: list[str] = []
            try:
                if action not in ("save_as", "reload") and self.live is not None:
                    try:
                        notices += self.live.save_now().notices
                    except SessionConflict as exc:  # what this chat added is not saved; it says so
                        notices.append(exc.message)
                if action == "new":
                    engine.new_chat()
                if action == "fork":  # only the shown path, and the cache that holds it
                    live = manager.fork(engine, name)  # its save's notices are in live.report
                else:
                    live = manager.resume(name, engine, system_prompt=system_prompt)
                if action not in ("open", "fork"):
                    notices += live.save_now().notices
                draft, choices = "", SessionChoices()
                if action in ("open", "reload"):  # what it keeps besides its tree: probabilities scored, a
                    # draft, the choices (chatapp.engine.sessions.choices)
                    engine.remember_reply_probs({mid: probs_from_json(json.loads(text))
                                                 for mid, text in manager.store.scores(name).items()})
                    draft = manager.store.draft(name) if action == "open" else ""
                    choices = manager.store.choices(name)
                    if choices.history in THINKING_HISTORIES:  # before the figures: their forecast depends on it
                        engine.thinking.history = choices.history
                notices = live.manager.notices + notices  # what opening the database tidied, said once
                live.manager.notices = []
                saved_with = other_model(live.saved_model, live) if action == "open" else None
                app.post_message(SessionOpened(live, engine.branch_figures(), replaced=action != "save_as",
                                               notices=notices, other_model=saved_with, forked=action == "fork",
                                               draft=draft, choices=choices))
            except ChatappError as exc:
                app.post_message(SessionFailed(exc.one_line()))
            except Exception as exc:  # noqa: BLE001 - the app must not stay "opening session"
                app.post_message(SessionFailed(f"Session: {type(exc).__name__}: {exc}"))

    def keep_chat(self, engine: Engine, question: str) -> LiveSession | None:
        """On the turn's worker, before the first turn of a chat no session holds: make it a session
        named after its first question, saved after every turn from this one on, as every peer
        keeps every chat. None (and said once) when the sessions database cannot be opened."""
        try:
            manager = self.manager or SessionManager.open(self.app.settings)
            live = manager.resume(manager.name_for(question), engine, new=True)
        except (ChatappError, OSError) as exc:
            error = exc.one_line() if isinstance(exc, ChatappError) else str(exc)
            self.app.post_message(SessionSaved("", [], f"this chat is not kept: {error}"))
            return None
        self._choices_due = bool(self.chosen.chosen())  # a chat kept: what was chosen for it goes with it
        self.app.post_message(SessionOpened(live, engine.branch_figures(), replaced=False, kept=True))
        return live

    def autosave(self, live: LiveSession, record: TurnRecord) -> None:
        """On the turn's worker, right after TurnFinished: save the turn (its record annotated),
        and the choices made before the session was written."""
        if self.app.preset_name is not None:  # the preset the turn ran with, as ask's records keep it
            record.extra.setdefault("preset", self.app.preset_name)
        self._save(live, lambda: live.save_turn(record))
        self._write_choices(live)

    def save_after_change(self, live: LiveSession) -> None:
        """On a branch worker, after a switch or a delete changed the active leaf: save it."""
        self._save(live, live.save_now)

    def keep_scores(self, live: LiveSession, message_id: str, probs: tuple[TokenProbs, ...]) -> None:
        """On the scoring worker: keep a scored reply's probabilities with the session."""
        try:
            live.manager.store.keep_scores(live.name, message_id, json.dumps([p.to_json() for p in probs]))
        except (ChatappError, OSError) as exc:
            self.app.post_message(SessionSaved(live.name, [], f"reply {message_id}'s probabilities not kept with "
                                                              f"session {live.name}: {exc}"))

    def _save(self, live: LiveSession, save: Callable[[], SaveReport]) -> None:
        """Run a save on a worker; what went wrong, or what it noticed, goes to the app as SessionSaved."""
        try:
            saved = save()
        except (ChatappError, OSError) as exc:
            error = exc.one_line() if isinstance(exc, ChatappError) else str(exc)
            self.app.post_message(SessionSaved(live.name, [], f"session {live.name} not saved: {error}",
                                               conflict=exc if isinstance(exc, SessionConflict) else None))
            return
        if saved.notices:
            self.app.post_message(SessionSaved(live.name, saved.notices))

    def save_on_quit(self) -> list[str]:
        """Save the open session as it stands (call with the turn lock held). Returns problems, in words."""
        live = self.live
        if live is None:
            return []
        try:
            saved = live.save_now()
            write_draft(live, self.app.composer_text)
        except (ChatappError, OSError) as exc:
            return [f"session {live.name} not saved: {exc}"]
        return [f"session {live.name}: {notice}" for notice in saved.notices]

    # --- what the workers posted (the app's handlers call these) ----------------------------------
    async def opened(self, message: SessionOpened) -> None:
        app, live = self.app, message.live
        self.live, self.manager = live, live.manager
        app.session_name = live.name
        if not message.kept:  # a kept chat's turn runs on: its status stays
            app.status = ""
        app.show_attachments()
        report = live.report
        if message.replaced:  # another conversation: every panel starts from the session's figures
            path, dropped = shown_path(app.engine)
            select = index_in(path, self._select)
            self._select = None
            await app.show_path(path, dropped, select, anew=True)
            app.branch = fresh(message.figures, "session" if report.restored else "")
        if report.notice:  # once, in the transcript above the restored turns; a toast said it again
            await app.add_notice(f"session {live.name}: {report.notice}",
                                 "session" if report.restored else "session-fallback")
        elif message.kept:
            app.notify(f"this chat is kept as session {live.name} (F6 lists, renames or deletes it)", title="Session",
                       timeout=4, markup=False)
        elif report.created and message.forked:
            app.notify(f"forked the shown path into session {live.name}: saved after every turn", title="Session",
                       timeout=4, markup=False)
        elif report.created:
            app.notify(f"{'new session' if message.replaced else 'saved this chat as'} {live.name}: "
                       "saved after every turn", title="Session", timeout=4, markup=False)
        else:
            app.notify(f"opened session {live.name}", title="Session", timeout=4, markup=False)
        if message.other_model:
            summary = app.engine.summary
            app.notify(f"session {live.name} was saved with {message.other_model}; it continues with "
                       f"{summary.name} ({summary.quant})", title="Session", severity="warning", timeout=10,
                       markup=False)
        for notice in report.notices:  # attachments restored, or dropped
            app.notify(f"session {live.name}: {notice}", title="Session", timeout=8, markup=False)
        for notice in message.notices:
            app.notify(notice, title="Session", severity="warning", timeout=10, markup=False)
        if message.draft and not app.composer_text.strip():  # what was typed there last, not sent
            app.edit_text(message.draft)
            try:
                live.manager.store.set_draft(live.name, "")  # the composer holds it now; leaving keeps it again
            except (ChatappError, OSError):
                pass
            app.notify(f"session {live.name}'s unsent text is back in the composer", title="Session", timeout=5,
                       markup=False)
        self._take_choices(message.choices)
        app.session_busy = False

    def _take_choices(self, choices: SessionChoices) -> None:
        """An opened session's thinking mode, earlier thoughts' keeping and reply shape, where it
        kept them, from its next turn on (its tool choice: the app gives it to the tools' controller)."""
        app = self.app
        if not choices.chosen():
            return
        self.chosen = replace(self.chosen, **choices.chosen())
        self._choices_due = False
        thinking = app.engine.thinking  # (earlier thoughts' keeping was set on the opening worker)
        if choices.think and thinking.format.active and choices.think != thinking.mode:
            try:
                app.notify(f"thinking {thinking.set_mode(choices.think)}, as session {self.name} was left",
                           title="Session", timeout=4, markup=False)
            except ChatappError as exc:
                app.notify(f"session {self.name}'s thinking mode is not used: {exc.one_line()}", title="Session",
                           severity="warning", timeout=8, markup=False)
        if choices.shape:
            self._take_shape(choices.shape)

    def _take_shape(self, kept: str) -> None:
        """The reply shape the session was left with, checked again (an edited database costs the
        shape, in one line, not the session)."""
        app = self.app
        try:
            shape = shape_from_json(kept)
        except ChatappError as exc:
            app.notify(f"session {self.name}'s reply shape is not used: {exc.one_line()}", title="Session",
                       severity="warning", timeout=8, markup=False)
            return
        app.engine.set_generation(shape=shape)
        app.reply_shape = shape.describe()
        app.notify(f"every reply is a value of the {app.reply_shape}, as session {self.name} was left",
                   title="Session", timeout=5, markup=False)

    def failed(self, message: SessionFailed) -> None:
        self.app.session_busy = False
        self.app.session_name, self.app.status = self.name, ""
        self.app.notify(message.error, severity="error", timeout=10, markup=False)

    def saved(self, message: SessionSaved) -> None:
        if self.live is not None:  # the save follows a rename made in another process
            self.app.session_name = self.live.name
        if message.conflict and self.live is not None:
            if isinstance(message.conflict, SessionRemoved):
                self.detach()
            else:
                self._offer_reload(f"session {self.live.name!r} was changed by another process",
                                   unsaved_turn=True)
        if message.error:
            self.app.notify(message.error, title="Session", severity="error", timeout=10, markup=False)
        for notice in message.notices:
            self.app.notify(f"session {message.name}: {notice}", title="Session", severity="warning", timeout=10,
                            markup=False)
