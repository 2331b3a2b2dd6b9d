"""The sessions controller (chatapp.ui.controllers.sessions) on a small host App, on the real
default model: a session opened at start on a worker, saved and resumed, and a bad name said in
one line (the app's side, with the sessions screen: tests/ui/test_app_sessions.py)."""

from __future__ import annotations

from chatapp.ui.controllers.sessions import SessionController
from chatapp.ui.messages import SessionOpened
from tests.ui._helpers import Messages, notified, store, wait_until


async def test_a_session_opened_at_start_is_made_on_a_worker_and_saved(make_host):
    host, seen = make_host(SessionController), Messages()
    async with host.run_test(message_hook=seen) as pilot:
        host.controller.open_at_start("notes")
        assert host.session_busy  # at once: the worker runs
        await wait_until(pilot, lambda: seen.count(SessionOpened) == 1, 60)
        await wait_until(pilot, lambda: not host.session_busy, 10)
        assert host.controller.name == host.session_name == "notes" and host.status == ""
        assert host.shown == 1  # its attachments (none) shown with it
        assert host.branch.figures == seen.of(SessionOpened)[0].figures

        list(host.engine.send("Hello"))  # a turn the app would autosave; here saved on quit, as the app does
        assert host.gate.release(lambda engine: host.controller.save_on_quit(), timeout=30) == []
    saved = store().store.get("notes")
    assert [m.role for m in saved.messages if m.role != "system"] == ["user", "assistant"]


async def test_a_bad_session_name_at_start_is_one_line_and_nothing_is_saved(make_host):
    host, seen = make_host(SessionController), Messages()
    async with host.run_test(message_hook=seen) as pilot:
        host.controller.open_at_start("../escape")
        note = await notified(pilot, seen, lambda n: n.severity == "error")
        assert "\n" not in note.message and "session name" in note.message
        assert host.session_name is None and host.controller.live is None and not host.session_busy
