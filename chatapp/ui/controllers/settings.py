"""The app's side of the conversation's settings: the system prompt (Ctrl+S), sampling (Ctrl+O),
drafting and the reply shape (the palette, `/schema`), each asked in a dialog or toggled, and
taken by the engine from the next turn on."""

from __future__ import annotations

from dataclasses import replace

from chatapp.config import THINKING_HISTORIES
from chatapp.engine.chat.thoughts import parse_think, think_mode
from chatapp.ui.host import ChatHost, SessionKeeper
from chatapp.engine.sessions.choices import MAX_SHAPE
from chatapp.engine.shape import ReplyShape
from chatapp.engine.stats import TurnRecord
from chatapp.errors import ChatappError
from chatapp.ui.screens.reply_shape import MASK, OFF, ReplyShapeScreen, read_shape, shape_error
from chatapp.ui.screens.sampling import Sampling, SamplingScreen, checked_sampling
from chatapp.ui.slash import set_values
from chatapp.ui.screens.system_prompt import SystemPromptScreen


class SettingsController:
    def __init__(self, app: ChatHost, sessions: SessionKeeper) -> None:
        self.app = app
        self.sessions = sessions

    def system_prompt(self) -> None:
        app = self.app

        def apply(text: str | None) -> None:
            if text is None or app.busy("change the system prompt"):
                return
            changed = text != app.engine.system_prompt
            app.engine.set_system_prompt(text)
            line = "System prompt set" if text else "System prompt cleared"
            if changed and any(m.role == "user" for m in app.engine.context_messages()):
                line += "; the next turn prefills the conversation again (the cache starts with the old one)"
            app.notify(line, timeout=5)

        app.push_screen(SystemPromptScreen(app.engine.system_prompt), apply)

    def sampling(self, typed: str = "") -> None:
        """The sampler's settings; for a thinking model, its thinking (on, off or a budget) too.
        `typed`: `/set`'s words ("temperature 0.2 top_k 20", chatapp.ui.slash.set_values), set at
        once; else the dialog (Ctrl+O) asks."""
        app = self.app
        thinking = app.engine.thinking
        thinks = thinking.format.active

        def apply(result: Sampling | None) -> None:
            if result is None:
                return
            app.engine.set_generation(**result.sampler())
            line = result.describe()
            if thinks and result.think != thinking.mode:
                line += f", thinking {self._set_think(result.think)}"
            app.notify(line, title="Sampling", timeout=4)

        generation = app.engine.generation
        current = Sampling(generation.temperature, generation.max_tokens, thinking.mode, top_k=generation.top_k,
                           top_p=generation.top_p, min_p=generation.min_p, seed=generation.seed)
        if typed:
            try:
                apply(checked_sampling(set_values(typed), current))
            except ChatappError as exc:
                app.notify(exc.one_line(), title="Sampling", severity="error", timeout=8, markup=False)
                app.edit_text(f"/set {typed}", only_if_empty=True)  # back in the composer, to mend
            return
        check = (lambda text: think_mode(parse_think(text))) if thinks else None
        app.push_screen(SamplingScreen(current, check), apply)

    def think(self, mode: str) -> None:
        """Thinking on, off or a budget (the palette's "Thinking: …"), from the next reply on."""
        if not self.app.engine.thinking.format.active:
            self.app.notify("This model does not think (its template has no thought markers)", title="Thinking",
                            timeout=4)
            return
        self.app.notify(f"thinking {self._set_think(mode)} from the next reply", title="Thinking", timeout=4)

    def thinking_history(self, history: str) -> None:
        """Earlier thoughts as the template renders them or kept as generated (the palette's
        "Earlier thoughts: …"), from the next turn on; the KV panel's forecast of what that turn
        prefills again is worked out anew on a worker."""
        app = self.app
        if history not in THINKING_HISTORIES:
            app.notify(f"earlier thoughts are {' or '.join(THINKING_HISTORIES)}, not {history!r}", severity="error",
                       timeout=6, markup=False)
            return
        if app.busy("change how earlier thoughts are kept"):
            return
        app.engine.thinking.history = history
        self.sessions.keep_choice(history=history)
        said = {"keep": "kept as generated: the cache holds the next turn's start",
                "template": "as the template renders them (often dropped: the next turn may prefill again)"}
        app.notify(f"earlier thoughts {said[history]}", title="Thinking", timeout=5, markup=False)
        app.run_worker(self._refigure, name="figures", group="figures", thread=True, exit_on_error=False)

    def _refigure(self) -> None:
        """On a worker, with the turn lock: the shown branch's figures for the prompt as now rendered."""
        app = self.app
        with app.gate.turn() as engine:
            if engine is None:
                return
            figures = engine.branch_figures()
        try:
            app.call_from_thread(lambda: setattr(app, "branch", replace(app.branch, figures=figures)))
        except RuntimeError:  # the app is gone: nothing to show
            pass

    def _set_think(self, mode: str) -> str:
        """Set the mode and keep it with the open session; what it now is, in words."""
        thinking = self.app.engine.thinking
        thinking.set_mode(mode)
        self.sessions.keep_choice(think=thinking.mode)
        if thinking.mode == "off":
            return "off" + (" (the template's enable_thinking switch)" if thinking.switchable
                            else " (the thought is closed before its first token)")
        return "on" if thinking.mode == "on" else f"budget {int(thinking.mode):,} tokens"

    def reply_shape(self, typed: str = "") -> None:
        """The shape every reply must have from the next turn (chatapp.engine.shape). `typed`:
        `/schema`'s text (a schema, "off", or "mask": count the grammar's mask or stop), set at
        once; else the dialog asks."""
        app = self.app
        if typed.strip().lower() == MASK:
            counting = not app.engine.generation.grammar_mask
            app.engine.set_generation(grammar_mask=counting)
            app.notify("each reply token under a grammar: the entries it allowed and the probability it cut, in "
                       "the Tokens panel (the whole vocabulary is masked: slower)" if counting else
                       "the grammar's mask is no longer counted", title="Reply shape", timeout=6, markup=False)
            return

        def apply(shape: ReplyShape | str | None) -> None:
            if shape is None:
                return
            was = app.engine.generation.shape
            app.engine.set_generation(shape=None if shape == OFF else shape)
            app.reply_shape = None if shape == OFF else shape.describe()
            kept = "" if shape == OFF else shape.to_json()
            if len(kept) > MAX_SHAPE:
                app.notify(f"this shape is longer than {MAX_SHAPE // 1024} KiB as text: it is used, not kept with "
                           "the session", title="Reply shape", severity="warning", timeout=6, markup=False)
                kept = ""
            self.sessions.keep_choice(shape=kept)
            if shape == OFF:
                app.notify("replies are free text again" if was is not None else "no reply shape was set",
                           title="Reply shape", timeout=4, markup=False)
            else:
                app.notify(f"every reply from the next turn is a value of the {app.reply_shape}; "
                           "the reply is checked after the turn", title="Reply shape", timeout=6, markup=False)

        if typed.strip():
            if typed.strip().lower() == OFF:
                apply(OFF)
                return
            try:
                apply(read_shape(typed))
            except ChatappError as exc:
                app.notify(shape_error(exc), title="Reply shape", severity="error", timeout=8, markup=False)
                app.edit_text(f"/schema {typed}", only_if_empty=True)  # back in the composer, to mend
            return
        app.push_screen(ReplyShapeScreen(app.engine.generation.shape), apply)

    async def shape_checked(self, record: TurnRecord) -> None:
        """After a turn under a schema: whether the reply is a value of it and, if not, where."""
        if "schema_valid" not in record.extra:
            return
        if record.extra["schema_valid"]:
            await self.app.add_notice("schema: the reply is valid", "shape")
        else:
            await self.app.add_notice(f"schema: the reply is not valid: {record.extra.get('schema_error', '')}",
                                      "shape-bad")

    def toggle_drafting(self) -> None:
        """Drafting on or off from the next reply (a reply being written keeps how it started)."""
        engine = self.app.engine
        state = engine.set_drafting("off" if engine.drafting.mode != "off" else "ngram")
        self.app.notify(state.describe(), title="Drafting", severity="warning" if state.off_because else "information",
                        timeout=6 if state.off_because else 3, markup=False)
