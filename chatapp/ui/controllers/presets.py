"""The app's side of presets (chatapp.presets): each one a palette entry ("Preset: NAME"); picking
one switches the open chat to it from the next turn, says first what that costs (samplers only:
nothing prefilled again; a new system prompt: the tokens prefilled again, counted before), shows
its name in the header and keeps it with the session."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from chatapp.engine.chat import preset_switch
from chatapp.errors import ChatappError
from chatapp.presets import Presets, load_presets
from chatapp.ui.host import ChatHost, SessionKeeper


class PresetController:
    def __init__(self, app: ChatHost, sessions: SessionKeeper,
                 choose_tools: Callable[[str], None] = lambda choice: None) -> None:
        """`choose_tools(choice)`: the tool choice a preset makes, as the palette's "Tools: …" makes it."""
        self.app = app
        self.sessions = sessions
        self.choose_tools = choose_tools
        self._presets: Presets | None = None

    def names(self) -> list[str]:
        """The presets the palette offers (read once, when the palette first asks)."""
        if self._presets is None:
            self._presets = load_presets()
        return sorted(self._presets.presets)

    def at_start(self, name: str | None) -> None:
        """The preset the app started with (its settings are the app's already): its tool choice,
        after the config's (a session opened at start then sets its own)."""
        if name is None:
            return
        try:
            tools = load_presets().get(name).tools
        except ChatappError:  # read when the command started; since edited: the palette says what is wrong
            return
        if tools:
            self.choose_tools(tools)

    def switch(self, name: str, because: str = "") -> None:
        """Switch to preset NAME from the next turn (on a worker: counting the cost tokenizes).
        `because`: why the app switches by itself (a model's default, a session's preset), said
        with it; such a preset gone or broken since is a warning, and the chat goes on without it."""
        app = self.app
        if app.busy("switch presets"):
            return
        try:
            self._presets = load_presets()  # read again: the file may have been edited meanwhile
            preset = self._presets.get(name)
        except ChatappError as exc:
            if because:
                app.notify(f"preset {name!r} ({because}) is not used: {exc.message}", title="Preset",
                           severity="warning", timeout=8, markup=False)
            else:
                app.notify(exc.message, title="Preset", severity="error", timeout=8, markup=False)
            return
        wanted = preset.apply(app.engine.settings)

        def run() -> None:
            with app.gate.turn() as engine:
                if engine is None:
                    return
                done = preset_switch.switch(engine, wanted)
                figures = engine.branch_figures()
                think = engine.thinking.mode if engine.thinking.format.active else None  # probed here, not on the UI
            try:
                app.call_from_thread(self._switched, name, done, figures, think, preset.tools, because)
            except RuntimeError:  # the app is gone: nothing to show
                pass

        app.run_worker(run, name="preset", group="preset", thread=True, exit_on_error=False)

    def _switched(self, name: str, done: preset_switch.SwitchPlan, figures, think: str | None, tools: str,
                  because: str = "") -> None:
        app = self.app
        app.preset_name = name
        self.sessions.keep_choice(preset=name)
        if "think_budget" in done.live and think is not None:  # kept as the palette's "Thinking: …" keeps it
            self.sessions.keep_choice(think=think)
        app.branch = replace(app.branch, figures=figures)
        said = done.notice()
        if tools:  # the tools' schemas join the prompt (or leave it): not counted in the plan
            said += f"; tools {tools}: their schemas change the prompt, so the next turn may prefill again"
        app.notify(f"{name}{f' ({because})' if because else ''}: {said}", title="Preset", timeout=8, markup=False)
        if tools:
            self.choose_tools(tools)
