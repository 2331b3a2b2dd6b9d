"""The App's own handlers for a running turn's messages (chatapp.ui.controllers.turns posts them
from the turn's worker): the transcript drawn as the reply streams, and the shown state the
panels follow (prefill progress, live decode, the live reply, the branch after the turn).

They draw into the App's widgets, which only the App does, so they are the App's methods rather
than a controller's; they live in a module of their own, mixed into ChatApp, so that app.py
stays within its size."""

from __future__ import annotations

from chatapp.ui.messages import (
    PrefillFinished, PrefillProgressed, ReplyProgress, ThoughtProgress, ToolStep, TurnFailed, TurnFinished,
    TurnStarted, TurnTrimmed, dropped_after_exit)


class TurnMessages:
    """Mixed into ChatApp (its attributes are the App's): what the screen does at each step of a
    turn. Textual finds a message's handler anywhere in the App's class hierarchy."""

    @dropped_after_exit
    async def on_turn_started(self, message: TurnStarted) -> None:
        self.reply_pacer.reset()
        self.typed_ahead = None
        if message.path is not None:
            await self._transcript.show_path(message.path, message.dropped)
        else:
            await self._transcript.add_user(message.user_text, message.images)
        await self._transcript.start_reply()
        self.live_reply, self.live_tokens = "", ()

    @dropped_after_exit
    async def on_turn_trimmed(self, message: TurnTrimmed) -> None:
        await self._transcript.show_trimmed(message.event)

    @dropped_after_exit
    def on_prefill_progressed(self, message: PrefillProgressed) -> None:
        event = message.event
        if event.done < event.total:
            self.status = f"prefill {event.done:,}/{event.total:,}…"
        self.prefill_progress = event

    @dropped_after_exit
    def on_prefill_finished(self, message: PrefillFinished) -> None:
        self.status = "generating…"
        self.prefill_done, self.prefill_progress, self.decode, self.thought_decode = message.event, None, None, None
        self.live_cells = message.event.prompt_tokens

    @dropped_after_exit
    async def on_reply_progress(self, message: ReplyProgress) -> None:
        # The panels repaint without a layout, so they always keep up; the reply's text waits
        # when the screen has been costly to lay out (TurnFinished brings the whole text).
        if self.reply_pacer.due():
            await self._transcript.show_progress(message.text)
            self.reply_pacer.mark()
        self.decode = message.live
        self.live_cells = message.live.kv_used
        self.live_tokens = message.tokens  # before the text, whose change repaints the Tokens panel
        self.live_reply = (self._thought_so_far + message.text) if message.text else self._thought_so_far

    @dropped_after_exit
    async def on_thought_progress(self, message: ThoughtProgress) -> None:
        await self._transcript.show_thought(message.text, message.tokens,  # a thinking model's, folded later
                                            message.live.decode_ms if message.live is not None else 0.0)
        if message.live is not None:  # the Speed panel's live decode, its thinking part
            self.decode = self.thought_decode = message.live
            self.live_cells = message.live.kv_used
        self.live_tokens = message.pieces
        self.live_reply = self._thought_so_far = message.text

    @dropped_after_exit
    async def on_tool_step(self, message: ToolStep) -> None:
        """A tool loop's result to draw, or (none) its next step's reply to start (chatapp.ui.controllers.tools)."""
        await self._transcript.tool_step(message.result, message.note)

    @dropped_after_exit
    async def on_turn_finished(self, message: TurnFinished) -> None:
        record = message.record
        if message.path is not None:  # a tool loop's step: its calls and results as messages of their own
            await self._transcript.show_path(*message.path)
        else:
            await self._transcript.finish_reply(record)
            self._transcript.name_turn(record)
            await self.settings_ui.shape_checked(record)
        self._live_over()
        self.branch = self.branch.after_turn(record, message.view, message.figures,
                                             self.branches_ui.turn_note(record))
        if message.more:  # the worker runs the calls, then the loop's next step (ToolStep)
            self.status = "running a tool…"
            return
        if end := record.extra.get("tool_loop_end"):  # why the tool loop went no further
            self.notify(str(end), title="Tools", severity="warning", timeout=8, markup=False)
        if error := record.extra.get("server_error"):  # the reply so far is kept, marked stopped
            self.notify(str(error), title="Server", severity="error", timeout=10, markup=False)
        self.attachments_ui.turn_ended(asked=True)  # the question holds its images now
        self.attachments_ui.show()  # sized again for this turn (max_tokens may have changed)
        self._turn_over()

    @dropped_after_exit
    async def on_turn_failed(self, message: TurnFailed) -> None:
        await self._transcript.fail_reply(message.error, message.refused)
        if message.refused and message.user_text:
            self.edit_text(message.user_text, only_if_empty=True)
        self.notify(message.error, severity="error", timeout=8, markup=False)
        self.branches_ui.turn_failed(message.refused)
        self.attachments_ui.turn_ended(asked=not message.refused)  # a refused question keeps its images
        self._live_over()
        if message.figures is not None:
            self.branch = self.branch.moved(message.figures)
        self._turn_over()

    def _live_over(self) -> None:
        self.prefill_progress = self.prefill_done = self.decode = self.thought_decode = self.live_cells = None
        self.live_reply, self._thought_so_far, self.live_tokens = None, "", ()

    def _turn_over(self) -> None:
        self.generating = False
        self.status = ""
        self.typing_prefill.ahead()  # what was typed while the reply was written
