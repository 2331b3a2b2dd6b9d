"""The attach controller (chatapp.ui.controllers.attachments) on a small host App, on the real
default model: /attach typed, a file that is not there, and a worker that finds the engine
released (the app's side, with the picker and the panels: tests/ui/test_attach.py)."""

from __future__ import annotations

from pathlib import Path

from chatapp.ui.controllers.attachments import AttachController
from chatapp.ui.messages import AttachFailed, Attached
from chatapp.ui.widgets.transcript import Notice
from tests.engine.retrieval.conftest import DOCS
from tests.ui._helpers import Messages, wait_until
from tests.ui.controllers.small_host import Host


async def test_the_attach_controller_runs_on_a_small_host(engine):
    host, seen = Host(engine, AttachController), Messages()
    async with host.run_test(message_hook=seen) as pilot:
        assert host.controller.composer_command(f"/attach {DOCS / 'typer.md'}")
        await wait_until(pilot, lambda: seen.of(Attached) or seen.of(AttachFailed))
        assert not seen.of(AttachFailed)
        assert [plan.attachment.name for plan in seen.of(Attached)[0].report.added] == ["typer.md"]
        await wait_until(pilot, lambda: any("attached typer.md" in str(n.render()) for n in host.query(Notice)))
        assert host.busy_with == ["attach a file"]

        missing = Path(DOCS / "no-such-file.md")
        assert host.controller.composer_command(f"/attach {missing}")
        await wait_until(pilot, lambda: seen.of(AttachFailed))
        assert host.composer.text == f"/attach {missing}"  # the command comes back to be fixed
        assert not host.attaching

        host.gate.release(lambda e: [], timeout=5)
        host.controller.attach_path(DOCS / "typer.md")
        await pilot.pause(0.5)
        assert len(seen.of(Attached)) == 1  # released: the worker found no engine and did nothing
