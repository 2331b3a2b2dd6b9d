"""The app's side of the conversation's settings: the system prompt (Ctrl+S), sampling (Ctrl+O)
and drafting (the palette), each asked in a dialog or toggled, and taken by the engine from the
next turn on."""

from __future__ import annotations

from chatapp.ui.host import ChatHost
from chatapp.ui.screens.sampling import Sampling, SamplingScreen
from chatapp.ui.screens.system_prompt import SystemPromptScreen


class SettingsController:
    def __init__(self, app: ChatHost) -> None:
        self.app = app

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

    def sampling(self) -> None:
        app = self.app

        def apply(result: Sampling | None) -> None:
            if result is not None:
                app.engine.set_generation(temperature=result.temperature, max_tokens=result.max_tokens)
                app.notify(f"temperature {result.temperature:g}, max tokens {result.max_tokens:,}", timeout=3)

        generation = app.engine.generation
        app.push_screen(SamplingScreen(Sampling(generation.temperature, generation.max_tokens)), apply)

    def toggle_drafting(self) -> None:
        """Drafting on or off from the next reply (a reply being written keeps how it started)."""
        engine = self.app.engine
        state = engine.set_drafting("off" if engine.drafting.mode != "off" else "ngram")
        self.app.notify(state.describe(), title="Drafting", severity="warning" if state.off_because else "information",
                        timeout=6 if state.off_because else 3, markup=False)
