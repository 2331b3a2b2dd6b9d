"""The settings controller (chatapp.ui.controllers.settings) on a small host App, on the real
default model: drafting toggled from the palette, and the system prompt and sampling taken from
their dialogs (the app's side: tests/ui/test_app.py, tests/ui/test_drafting_ui.py)."""

from __future__ import annotations

from chatapp.ui.controllers.settings import SettingsController
from chatapp.ui.screens.sampling import Sampling, SamplingScreen
from chatapp.ui.screens.system_prompt import SystemPromptScreen
from chatapp.ui.themes import load_themes
from tests.ui._helpers import Messages, notified, wait_until
from tests.ui.controllers.small_host import NoSessions


async def test_drafting_toggles_and_says_why_when_it_cannot_run(make_host):
    host, seen = make_host(lambda app: SettingsController(app, NoSessions())), Messages()
    engine = host.engine
    async with host.run_test(message_hook=seen) as pilot:
        before = engine.drafting.mode
        host.controller.toggle_drafting()
        state = engine.drafting
        assert (state.mode == "off") == (before != "off")
        note = await notified(pilot, seen, lambda n: n.title == "Drafting")
        assert note.message == state.describe()
        assert note.severity == ("warning" if state.off_because else "information")
        host.controller.toggle_drafting()
        assert engine.drafting.mode == before


async def test_the_system_prompt_and_sampling_come_from_their_dialogs(make_host, tmp_path):
    themes = load_themes(user_dir=tmp_path / "none")
    host, seen = make_host(lambda app: SettingsController(app, NoSessions()), theme_result=themes), Messages()
    engine = host.engine
    async with host.run_test(message_hook=seen) as pilot:
        host.controller.system_prompt()
        await wait_until(pilot, lambda: isinstance(host.screen, SystemPromptScreen), 5)
        await pilot.pause()
        host.screen.dismiss("You answer in one word.")
        await notified(pilot, seen, lambda n: n.message == "System prompt set")
        assert engine.system_prompt == "You answer in one word." and host.busy_with == ["change the system prompt"]

        host.controller.sampling()
        await wait_until(pilot, lambda: isinstance(host.screen, SamplingScreen), 5)
        await pilot.pause()
        host.screen.dismiss(Sampling(0.5, 32, top_k=12, top_p=0.9, min_p=0.02, seed=3))
        await notified(pilot, seen, lambda n: n.message == "temperature 0.5, max tokens 32, top-k 12, top-p 0.9, "
                                                            "min-p 0.02, seed 3")
        generation = engine.generation
        assert (generation.temperature, generation.max_tokens, generation.top_k, generation.top_p,
                generation.min_p, generation.seed) == (0.5, 32, 12, 0.9, 0.02, 3)

        host.controller.sampling()  # Esc: nothing changes
        await wait_until(pilot, lambda: isinstance(host.screen, SamplingScreen), 5)
        await pilot.pause()
        host.screen.dismiss(None)
        await pilot.pause()
        assert (engine.generation.temperature, engine.generation.max_tokens) == (0.5, 32)
