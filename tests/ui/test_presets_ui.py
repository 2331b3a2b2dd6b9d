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


async def test_a_session_opened_again_switches_to_its_preset(make_app):
    """Issue 56: a session is kept with its preset; opened in the TUI (F6, or at start, where no
    --preset chose one) it runs with that preset again, and one removed since is a warning."""
    write_presets()
    app, seen = make_app()
    async with app.run_test(size=WIDE, message_hook=seen) as pilot:
        await send(pilot, "Name a fruit.", seen)
        await app.run_action("preset('warm')")
        await workers_done(pilot, "preset")
        await send(pilot, "Name a colour.", seen)
        name = app.session_name
    app.release_engine()

    again, seen = make_app(session=name)
    async with again.run_test(size=WIDE, message_hook=seen) as pilot:
        said = await notified(pilot, seen, lambda n: n.title == "Preset")
        assert said.message.startswith(f"warm (as session {name} was left): ") and "KV cache is kept" in said.message
        assert "preset: warm" in header(again) and again.engine.generation.top_k == 20
    again.release_engine()

    path = Path(os.environ["XDG_CONFIG_HOME"]) / "chatapp" / "config.toml"
    path.write_text(PRESETS.replace("[presets.warm]", "[presets.cool]"))
    gone, seen = make_app(session=name)
    async with gone.run_test(size=WIDE, message_hook=seen) as pilot:
        said = await notified(pilot, seen, lambda n: n.title == "Preset")
        assert said.severity == "warning" and said.message.startswith(f"preset 'warm' (as session {name} was left) "
                                                                      "is not used: no preset 'warm'")
        assert "preset:" not in header(gone)
    gone.release_engine()


async def test_a_model_switched_to_takes_the_preset_that_names_it(make_app, default_model_path, tmp_path):
    """As `--model` does at start: the preset whose `model` names the model loaded from Ctrl+L's
    picker is switched to, and said so."""
    copy = tmp_path / "other-smollm.gguf"
    copy.write_bytes(default_model_path.read_bytes())
    path = Path(os.environ["XDG_CONFIG_HOME"]) / "chatapp" / "config.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(PRESETS + '\n[presets.other]\nmodel = "other-smollm.gguf"\ntop_k = 5\n')
    app, seen = make_app(incognito=True)
    async with app.run_test(size=WIDE, message_hook=seen) as pilot:
        assert "preset:" not in header(app)
        app.models_ui.chosen(str(copy))
        said = await notified(pilot, seen, lambda n: n.title == "Preset", timeout=60)
        assert said.message.startswith("other (the default of this model): ")
        assert "preset: other" in header(app) and app.engine.generation.top_k == 5
        assert Path(app.engine.summary.path) == copy
