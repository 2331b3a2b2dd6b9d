"""The app's side of attachments: `/attach PATH` and `/detach NAME` typed in the composer (Tab
completes the path), the file picker (palette), the list in the header (F8 removes one), and
which attachment text each question was given, shown under it.

ChatApp inherits this. Attaching reads the file and tokenizes all of it to size and chunk it,
so a thread worker does it, holding the app's turn lock (a turn's retrieval uses the same
attachments); the handlers here only update widgets. Removing one re-plans from what is
already counted and cut, so it runs where it is asked for, between turns.
"""

from __future__ import annotations

from pathlib import Path

from textual import work

from chatapp.errors import ChatappError
from chatapp.ui.messages import AttachFailed, Attached, TurnRetrieved, dropped_after_exit
from chatapp.ui.screens.attach import AttachScreen, DetachScreen
from chatapp.ui.widgets.composer import Composer
from chatapp.ui.widgets.header import AppHeader
from chatapp.ui.widgets.transcript import Transcript

COMMANDS = ("/attach", "/detach")


def command_of(text: str) -> tuple[str, str] | None:
    """(command, argument) when the composer's text is a slash command, else None."""
    first, _, rest = text.strip().partition(" ")
    return (first, rest.strip()) if first in COMMANDS and "\n" not in text.strip() else None


class AttachControl:
    """Mixed into ChatApp, which provides engine, attaching, the turn lock, _busy and _released."""

    def composer_command(self, text: str) -> bool:
        """Carry out a slash command typed in the composer. False: it is a message, or the app
        is busy (then the text stays in the composer)."""
        command, argument = command_of(text) or ("", "")
        if command == "/attach":
            if self._busy("attach a file"):
                return False
            if argument:
                self.attach_path(Path(argument).expanduser())
            else:
                self.action_attach_file()
            return True
        if command == "/detach":
            if self._busy("remove an attachment"):
                return False
            if argument:
                self.detach(argument)
            else:
                self.action_detach()
            return True
        return False

    # --- attaching -------------------------------------------------------------------------
    def action_attach_file(self) -> None:
        if self._busy("attach a file"):
            return

        def chosen(path: Path | None) -> None:
            if path is not None and not self._busy("attach a file"):
                self.attach_path(path)

        self.push_screen(AttachScreen(Path.cwd()), chosen)

    def attach_path(self, path: Path) -> None:
        self.attaching = True
        self.query_one(AppHeader).status = f"attaching {path.name or path}…"
        self.attach_worker(path)

    @work(thread=True, exclusive=True, exit_on_error=False, group="attach")
    def attach_worker(self, path: Path) -> None:
        with self._turn_lock:
            if self._released:
                return
            try:
                self.post_message(Attached(str(path), self.engine.attach(path)))
            except ChatappError as exc:
                self.post_message(AttachFailed(str(path), exc.one_line()))
            except Exception as exc:  # noqa: BLE001 - the app must not stay "attaching"
                self.post_message(AttachFailed(str(path), f"Attachment: {type(exc).__name__}: {exc}"))

    @dropped_after_exit
    async def on_attached(self, message: Attached) -> None:
        self._attach_over()
        report = message.report
        for notice in report.notices:
            self.notify(notice, title="Attachment", severity="warning", timeout=8, markup=False)
        transcript = self.query_one(Transcript)
        for plan in report.added:
            how = "placed whole in the next question" if plan.whole else \
                f"{len(plan.chunks):,} chunks, the best placed before each question"
            await transcript.add_notice(f"attached {plan.attachment.name}: {plan.tokens:,} tokens, {how}", "info")
        if report.added:
            names = ", ".join(plan.attachment.name for plan in report.added)
            self.notify(f"attached {names}", title="Attachment", timeout=4, markup=False)

    @dropped_after_exit
    def on_attach_failed(self, message: AttachFailed) -> None:
        self._attach_over()
        self.notify(message.error, title="Attachment", severity="error", timeout=10, markup=False)
        composer = self.query_one(Composer)
        if not composer.text.strip():  # the command comes back, to fix the path
            composer.load_text(f"/attach {message.path}")
            composer.move_cursor(composer.document.end)

    def _attach_over(self) -> None:
        self.attaching = False
        self.query_one(AppHeader).status = ""
        self.show_attachments()

    # --- removing --------------------------------------------------------------------------
    def action_detach(self) -> None:
        plans = self.engine.attachments
        if not plans:
            self.notify("nothing is attached; /attach PATH or the palette attaches a file", timeout=4)
            return

        def chosen(name: str | None) -> None:
            if name is not None:
                self.detach(name)

        self.push_screen(DetachScreen(plans), chosen)

    def detach(self, name: str) -> None:
        if self._busy("remove an attachment"):
            return
        try:
            self.engine.detach(name)
        except ChatappError as exc:
            self.notify(exc.one_line(), severity="error", timeout=8, markup=False)
            return
        self.show_attachments()
        self.notify(f"removed {name}; earlier answers keep what they were given", title="Attachment",
                    timeout=4, markup=False)

    # --- showing ---------------------------------------------------------------------------
    def show_attachments(self) -> None:
        """The header's list, from the engine (after an attach, a removal, a new chat, a session
        or model change)."""
        self.query_one(AppHeader).attachments = tuple(p.attachment.name for p in self.engine.attachments)

    @dropped_after_exit
    async def on_turn_retrieved(self, message: TurnRetrieved) -> None:
        await self.query_one(Transcript).show_sources(message.context)

    def on_composer_path_candidates(self, message: Composer.PathCandidates) -> None:
        self.notify("  ".join(message.candidates), title="/attach", timeout=6, markup=False)
