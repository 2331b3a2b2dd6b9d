"""The TUI's autosave writes the session privately, whatever the umask (real engine, real model)."""

from __future__ import annotations

import pytest

from chatapp import paths
from tests.private_helpers import not_private, umask
from tests.ui._helpers import WIDE, opened, send_text, store

pytestmark = pytest.mark.app_settings(max_tokens=16, threads=0, opener=None)


@pytest.mark.parametrize("mask", [0o000, 0o022])
async def test_autosave_after_a_turn_is_private_whatever_the_umask(make_app, mask):
    with umask(mask):
        app, seen = make_app(session="s")
        async with app.run_test(size=WIDE, message_hook=seen) as pilot:
            await opened(pilot, seen)
            await send_text(pilot, app, seen, "Name a colour.")
            (summary,) = store().store.summaries()
            assert store().state_size(summary.state_key) > 0
        app.release_engine()  # the save on quit
    states = list((paths.sessions_dir() / "states").iterdir())
    assert [p.suffix for p in states] == [".kvstate"]
    assert not_private(paths.data_dir(), paths.cache_dir()) == []
