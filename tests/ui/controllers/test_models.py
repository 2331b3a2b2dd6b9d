"""The model controller (chatapp.ui.controllers.models) on a small host App, on the real default
model: what is shown of the loaded model at once, its file's scan from a worker, and a chat that
cannot switch models saying so (the switch itself, in the app: tests/ui/test_app.py,
tests/ui/test_model_picker.py, tests/ui/test_one_truth.py)."""

from __future__ import annotations

from pathlib import Path

from textual.notifications import Notify

from chatapp.engine.models.quant import model_info
from chatapp.ui.controllers.models import ModelController
from chatapp.ui.messages import ModelInfoReady
from tests.ui._helpers import Messages, notified, wait_until
from tests.ui.controllers.small_host import NoSessions


async def test_the_loaded_model_is_shown_at_once_and_its_scan_follows_from_a_worker(make_host):
    host, seen = make_host(lambda app: ModelController(app, None, NoSessions())), Messages()
    async with host.run_test(message_hook=seen) as pilot:
        host.controller.show_loaded()
        assert host.model == host.engine.summary and host.model_info is None
        await wait_until(pilot, lambda: host.model_info is not None, 60)
        assert seen.count(ModelInfoReady) == 1
        assert host.model_info == model_info(Path(host.engine.summary.local_file))

        # A scan of a model since replaced is dropped, and says nothing.
        shown = host.model_info
        host.controller.info_ready(ModelInfoReady("/elsewhere/other.gguf", None, "cannot scan other.gguf"))
        await pilot.pause()
        assert host.model_info is shown and seen.count(Notify) == 0


async def test_without_an_opener_the_chat_says_it_cannot_switch(make_host):
    host, seen = make_host(lambda app: ModelController(app, None, NoSessions())), Messages()
    async with host.run_test(message_hook=seen) as pilot:
        host.controller.ask()
        note = await notified(pilot, seen, lambda n: "cannot switch" in n.message)
        assert note.severity == "warning" and host.busy_with == ["switch model"]
        assert host.status == "" and not host.loading_model
