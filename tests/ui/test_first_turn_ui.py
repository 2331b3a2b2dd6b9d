"""The TUI's first question on a new machine waits for nothing made once (issue 36): the sessions
database that keeps the chat is opened while the question is typed, not between Enter and the
first token, and the memory bandwidth is measured after the reply, which says so. On the real
default model, in a fresh home (every test gets one). Order and structure only: nothing is timed."""

from __future__ import annotations

import pytest

from chatapp import paths
from chatapp.engine.machine.bandwidth import MEASURING
from chatapp.ui.messages import TurnStarted
from tests.ui._helpers import NARROW, Messages, send_text, wait_until


def database_made() -> bool:
    return (paths.sessions_dir() / "sessions.db").is_file()


@pytest.mark.unmeasured_machine  # a first run: the machine is not measured yet
async def test_the_sessions_database_is_made_before_the_first_question_is_sent(make_app):
    app, seen = make_app()
    assert not database_made()
    async with app.run_test(size=NARROW, message_hook=seen) as pilot:
        await wait_until(pilot, lambda: app.sessions_ui.manager is not None, 30)
        assert database_made() and seen.count(TurnStarted) == 0
        done = await send_text(pilot, app, seen, "Name a colour.")
        assert app.sessions_ui.live is not None  # the chat is kept, in the database opened at start
        assert done.record.extra["memory_bandwidth_gbps"] is None
        assert done.record.extra["memory_bandwidth_note"] == MEASURING
        again = await send_text(pilot, app, seen, "Another one.")
        assert again.record.extra["memory_bandwidth_gbps"] > 0


async def test_an_incognito_chat_makes_no_sessions_database(make_app):
    app, _ = make_app(incognito=True)
    async with app.run_test(size=NARROW, message_hook=Messages()) as pilot:
        await pilot.pause(0.5)
        await app.workers.wait_for_complete()
        assert app.sessions_ui.manager is None and not database_made()
