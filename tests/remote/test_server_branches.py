"""Branches over a real llama-server: an edit rides on the slot's prefix reuse, and each kept leaf
is a slot file of its own under --slot-save-path, restored on switching back."""

from __future__ import annotations

from chatapp.engine.opening import connect_engine
from chatapp.engine.sessions import SessionManager

from .conftest import SETTINGS


def turn(events):
    return list(events)[-1].record


def test_switching_back_restores_the_leafs_own_slot_file(llama_server, tmp_path):
    engine = connect_engine(SETTINGS.replace(server=llama_server.url, temperature=0.0))
    try:
        engine.clear_cache()
        turn(engine.send("Name a fruit."))
        first_leaf = engine.leaf
        edited = turn(engine.edit(engine.messages[1].id, "Name a colour."))
        # The edit shares the system prompt and the template's opening with the old prompt: the slot reuses them.
        assert edited.cached_tokens > 0 and edited.extra["action"] == "edit"
        switch = engine.switch(first_leaf)
        assert switch.how == "restored" and switch.source == "memory"
        files = sorted(path.name for path in llama_server.slot_dir.iterdir())
        assert f"chatapp-{engine.state_namespace}-{first_leaf}.bin" in files
        nxt = turn(engine.send("Another one?"))
        assert nxt.cached_tokens >= switch.tokens and nxt.prefill_tokens < 30
    finally:
        engine.close()


def test_two_sessions_on_one_server_never_share_a_slot_file(llama_server, tmp_path):
    names = set()
    manager = SessionManager.open(SETTINGS, tmp_path / "sessions")
    for session in ("one", "two"):
        engine = connect_engine(SETTINGS.replace(server=llama_server.url, temperature=0.0))
        try:
            live = manager.resume(session, engine)
            turn(engine.send("Name a fruit."))
            live.save_now(force=True)
            leaf = engine.leaf
            turn(engine.regenerate())
            live.save_now(force=True)
            names.add(f"chatapp-{live.state_key}-{leaf}.bin")
        finally:
            engine.close()
    on_server = {path.name for path in llama_server.slot_dir.iterdir()}
    assert len(names) == 2 and names <= on_server
