"""The app's side of attachments: `/attach PATH` and `/detach NAME` typed in the composer (Tab
completes the path), the file picker (palette), the list in the header (F8 removes one), and
which attachment text each question was given, shown under it.

ChatApp holds one `AttachController` (`app.attachments_ui`). Attaching reads the file and
tokenizes all of it to size and chunk it, so one of the app's thread workers (group "attach")
does it and only posts a message; the app's handlers pass it back here to update the widgets.
Reading needs no engine, so it runs outside the turn lock; sizing holds it (a turn's retrieval
uses the same attachments), so quitting waits for the lock no longer than sizing takes. Esc,
Ctrl+C and Ctrl+Q stop an attach (`stop`): the worker runs under
chatapp.engine.retrieval.cancel, which kills a PDF reader at once and ends sizing at its next
tokenizer call, all or nothing. Removing one re-plans from what is already counted and cut, so
it runs where it is asked for, between turns.

File names come from outside and can hold escape sequences (a name can set the terminal's
title or clipboard): every one shown goes through chatapp.format.one_line_text.
"""

from __future__ import annotations

import threading
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from chatapp.engine.images import ImageFacts, is_image_file, read_image_files
from chatapp.engine.retrieval.cancel import AttachStopped, check, stoppable
from chatapp.engine.retrieval.loading import load_path
from chatapp.errors import ChatappError
from chatapp.format import one_line_text
from chatapp.ui.messages import AttachFailed, Attached, ImageAttached, TurnRetrieved
from chatapp.ui.screens.attach import AttachScreen, DetachScreen

if TYPE_CHECKING:
    from chatapp.ui.host import ChatHost

COMMANDS = ("/attach", "/detach")


def plural(n: int, noun: str) -> str:
    """"1 token", "2,048 tokens"."""
    return f"{n:,} {noun}{'' if n == 1 else 's'}"


def command_of(text: str) -> tuple[str, str] | None:
    """(command, argument) when the composer's text is a slash command, else None."""
    first, _, rest = text.strip().partition(" ")
    return (first, rest.strip()) if first in COMMANDS and "\n" not in text.strip() else None


class AttachController:
    """Attaching and removing files for one ChatApp, and showing what is attached."""

    def __init__(self, app: ChatHost) -> None:
        self.app = app
        self._stop: threading.Event | None = None
        """Set to stop the attach worker now running."""
        self._images: tuple[ImageFacts, ...] = ()
        """Images attached for the next question (a vision model's, chatapp.engine.images)."""

    def composer_command(self, text: str) -> bool:
        """Carry out a slash command typed in the composer. False: it is a message, or the app
        is busy (then the text stays in the composer)."""
        command, argument = command_of(text) or ("", "")
        if command == "/attach":
            if self.app.busy("attach a file"):
                return False
            if argument:
                self.attach_path(Path(argument).expanduser())
            else:
                self.pick_file()
            return True
        if command == "/detach":
            if self.app.busy("remove an attachment"):
                return False
            if argument:
                self.detach(argument)
            else:
                self.pick_detach()
            return True
        return False

    # --- attaching -------------------------------------------------------------------------
    def pick_file(self) -> None:
        """The file picker; the chosen path is attached."""
        app = self.app
        if app.busy("attach a file"):
            return

        def chosen(path: Path | None) -> None:
            if path is not None and not app.busy("attach a file"):
                self.attach_path(path)

        app.push_screen(AttachScreen(Path.cwd()), chosen)

    def attach_path(self, path: Path) -> None:
        app = self.app
        app.attaching = True
        self._stop = threading.Event()
        app.status = f"attaching {one_line_text(path.name or str(path))}… (Esc stops)"
        app.run_worker(partial(self._attach, path, self._stop), name="attach", group="attach", thread=True,
                       exclusive=True, exit_on_error=False)

    def stop(self) -> bool:
        """Stop the attach now running (Esc, Ctrl+C, Ctrl+Q); False when none runs."""
        if not self.app.attaching or self._stop is None:
            return False
        self._stop.set()
        self.app.status = "stopping the attach…"
        return True

    def _attach(self, path: Path, stop: threading.Event) -> None:
        """Runs on a thread worker."""
        app = self.app
        try:
            if is_image_file(path):  # for the model's projector: read now, encoded by the next question's turn
                [(name, data)] = read_image_files([path])
                with app.gate.turn() as engine:
                    if engine is not None:
                        app.post_message(ImageAttached(str(path), engine.add_image(data, name)))
                return
            with stoppable(stop):
                loaded = load_path(path)
                with app.gate.turn() as engine:
                    if engine is None:
                        return
                    check()  # stopped while a turn or a session job held the lock
                    report = engine.add_attachments(loaded.attachments, loaded.notices)
            app.post_message(Attached(str(path), report))
        except AttachStopped:
            app.post_message(AttachFailed(str(path), f"attaching {one_line_text(path.name or str(path))} stopped; "
                                                     "nothing was attached", stopped=True))
        except ChatappError as exc:
            app.post_message(AttachFailed(str(path), exc.one_line()))
        except Exception as exc:  # noqa: BLE001 - the app must not stay "attaching"
            app.post_message(AttachFailed(str(path), one_line_text(f"Attachment: {type(exc).__name__}: {exc}")))

    async def attached(self, message: Attached) -> None:
        app = self.app
        self._attach_over()
        report = message.report
        for notice in report.notices:
            app.notify(one_line_text(notice), title="Attachment", severity="warning", timeout=8, markup=False)
        for plan in report.added:
            how = "placed whole in the next question" if plan.whole else \
                f"{len(plan.chunks):,} chunks, the best placed before each question"
            await app.add_notice(f"attached {one_line_text(plan.attachment.name)}: "
                                        f"{plural(plan.tokens, 'token')}, {how}", "info")
        if report.added:
            names = ", ".join(one_line_text(plan.attachment.name) for plan in report.added)
            app.notify(f"attached {names}", title="Attachment", timeout=4, markup=False)

    def attach_failed(self, message: AttachFailed) -> None:
        app = self.app
        self._attach_over()
        app.notify(one_line_text(message.error), title="Attachment", severity="warning" if message.stopped else "error",
                   timeout=10, markup=False)
        # The command comes back, to fix the path; not one whose path holds control characters
        # (picked in the tree), which the composer would send to the terminal as they are.
        if one_line_text(message.path) == message.path:
            app.edit_text(f"/attach {message.path}", only_if_empty=True)

    async def image_attached(self, message: ImageAttached) -> None:
        self._attach_over()
        self._images = (*self._images, message.facts)
        self.show()
        await self.app.add_notice(f"image {one_line_text(message.facts.describe())}: it goes with your next "
                                  "question", "info")

    def images_for_next_question(self) -> tuple[str, ...]:
        return tuple(facts.sha256 for facts in self._images)

    def turn_ended(self, asked: bool) -> None:
        """A question ran (`asked`): its images are in it now, not attached for the next one."""
        if asked and self._images:
            self._images = ()
            self.show()

    def _attach_over(self) -> None:
        self._stop = None
        self.app.attaching = False
        self.app.status = ""
        self.show()

    # --- removing --------------------------------------------------------------------------
    def pick_detach(self) -> None:
        """The list of attachments; the chosen one is removed."""
        plans = self.app.engine.attachments
        if not plans:
            self.app.notify("nothing is attached; /attach PATH or the palette attaches a file", timeout=4)
            return

        def chosen(name: str | None) -> None:
            if name is not None:
                self.detach(name)

        self.app.push_screen(DetachScreen(plans), chosen)

    def detach(self, name: str) -> None:
        app = self.app
        if app.busy("remove an attachment"):
            return
        try:
            app.engine.detach(name)
        except ChatappError as exc:
            app.notify(exc.one_line(), severity="error", timeout=8, markup=False)
            return
        self.show()
        app.notify(f"removed {one_line_text(name)}; earlier answers keep what they were given", title="Attachment",
                   timeout=4, markup=False)

    # --- showing ---------------------------------------------------------------------------
    def show(self) -> None:
        """The header's list, from the engine (after an attach, a removal, a new chat, a session
        or model change)."""
        self.app.attached = (*(p.attachment.name for p in self.app.engine.attachments),
                             *(f"image {facts.name}" for facts in self._images))

    async def retrieved(self, message: TurnRetrieved) -> None:
        await self.app.show_sources(message.context)

    def path_candidates(self, candidates: list[str]) -> None:
        """The paths that complete what follows /attach in the composer (Tab), in one line."""
        self.app.notify("  ".join(one_line_text(c) for c in candidates), title="/attach", timeout=6, markup=False)
