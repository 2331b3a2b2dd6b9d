"""Presets in the TUI on the real model: each is a palette entry; picking one says first what the
switch costs, shows its name in the header, and a switch of samplers only keeps the KV cache (the
next turn prefills its question and no cached token again)."""

from __future__ import annotations

import os
from pathlib import Path

from chatapp.config import Settings
from chatapp.engine.opening import open_engine
from chatapp.engine.sessions.export import session_data
from chatapp.ui.app import ChatApp
from chatapp.ui.commands import ChatCommands
from tests.ui._helpers import WIDE, header, notified, send, store, wait_until, workers_done

PRESETS = """[presets.warm]
temperature = 0.9
top_k = 20
seed = 7

[presets.pirate]
system_prompt = "You are a pirate."

[presets.clock]
tools = "auto"
"""


def write_presets() -> None:
    path = Path(os.environ["XDG_CONFIG_HOME"]) / "chatapp" / "config.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(PRESETS)


async def test_a_preset_from_the_palette_keeps_the_cache_when_only_samplers_change(make_app):
    write_presets()
    app, seen = make_app()
    async with app.run_test(size=WIDE, message_hook=seen) as pilot:
        offered = [title for title, _help, _run in ChatCommands(app.screen)._hits()]
        assert {"Preset: warm", "Preset: pirate"} <= set(offered)
        await send(pilot, "Name a fruit.", seen)
        held = app.engine.branch_figures().cached
        assert held > 0
        await app.run_action("preset('warm')")
        await workers_done(pilot, "preset")
        said = await notified(pilot, seen, lambda n: n.title == "Preset")
        assert "warm: changes temperature, top_k, seed" in said.message and "KV cache is kept" in said.message
        assert "preset: warm" in header(app)
        assert (app.engine.generation.temperature, app.engine.generation.top_k) == (0.9, 20)
        record = (await send(pilot, "Name a colour.", seen)).record
        assert record.cached_tokens >= held  # nothing the cache held was prefilled again
        manager, name = store(), app.session_name
        data = session_data(manager.store, name, manager.store.get(name))
        assert [entry.get("preset") for entry in data["journal"]] == [None, "warm"]
        assert data["choices"]["preset"] == "warm"
        await app.run_action("preset('pirate')")
        await workers_done(pilot, "preset")
        said = await notified(pilot, seen, lambda n: n.title == "Preset" and n.message.startswith("pirate"))
        assert "cached tokens again" in said.message and "preset: pirate" in header(app)
        await app.run_action("preset('nope')")
        await notified(pilot, seen, lambda n: n.title == "Preset" and "no preset 'nope'" in n.message)
        assert "preset: pirate" in header(app)


async def test_the_preset_the_app_starts_with_is_in_the_header_and_makes_its_tool_choice(default_model_path):
    write_presets()
    settings = Settings(n_ctx=1024, temperature=0.0, max_tokens=8, threads=2, incognito=True)
    app = ChatApp(open_engine(settings, str(default_model_path)), settings=settings, preset="clock")
    try:
        async with app.run_test(size=WIDE) as pilot:
            await wait_until(pilot, lambda: "preset: clock" in header(app))
            await wait_until(pilot, lambda: app.tools_ui.choice == "auto")
            await workers_done(pilot, "tools")
    finally:
        app.release_engine()
