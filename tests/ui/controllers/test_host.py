"""The engine gate, and a controller run on a small host App instead of ChatApp: the
controllers need only `ChatHost`, so each can be tested alone (after oterm's widget tests)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from textual.app import App, ComposeResult

from chatapp.config import Settings
from chatapp.engine.opening import open_engine
from chatapp.ui.controllers.attachments import AttachController
from chatapp.ui.host import ChatHost, EngineGate
from chatapp.ui.messages import AttachFailed, Attached
from chatapp.ui.widgets.composer import Composer
from chatapp.ui.shown import ShownBranch
from chatapp.ui.widgets.transcript import Notice, Transcript
from tests.engine.retrieval.conftest import DOCS
from tests.ui._helpers import Messages, wait_until

SETTINGS = Settings().replace(n_ctx=2048, temperature=0.0, max_tokens=16)


@pytest.fixture
def engine(default_model_path):
    """Closed by the test itself, through the gate."""
    return open_engine(SETTINGS, str(default_model_path))


class Closing:
    """An engine stand-in that records what the gate does to it."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def stop(self) -> None:
        self.calls.append("stop")

    def close(self) -> None:
        self.calls.append("close")


def test_the_gate_yields_the_engine_until_released_then_none():
    engine = Closing()
    gate = EngineGate(engine)  # type: ignore[arg-type]
    with gate.turn() as used, gate.tokenizing() as tokenizing:
        assert used is engine and tokenizing is engine
    said = gate.release(lambda e: [f"saved {len(e.calls)}"], timeout=1)
    assert said == ["saved 1"] and engine.calls == ["stop", "close"]
    with gate.turn() as used, gate.tokenizing() as tokenizing:
        assert used is None and tokenizing is None
    assert gate.release(lambda e: ["again"], timeout=1) == [] and engine.calls == ["stop", "close"]


def test_release_waits_for_the_running_turn_and_close_waits_for_tokenizing():
    engine = Closing()
    gate = EngineGate(engine)  # type: ignore[arg-type]
    in_turn, order = threading.Event(), []

    def turn() -> None:
        with gate.turn():
            in_turn.set()
            time.sleep(0.3)
            order.append("turn over")

    worker = threading.Thread(target=turn)
    worker.start()
    in_turn.wait(5)
    gate.release(lambda e: order.append("last words") or [], timeout=5)
    worker.join()
    assert order == ["turn over", "last words"] and engine.calls == ["stop", "close"]

    other, gate2 = Closing(), EngineGate(Closing())  # type: ignore[arg-type]
    with gate2.tokenizing():
        closer = threading.Thread(target=gate2.close, args=(other,))
        closer.start()
        closer.join(0.2)
        assert closer.is_alive() and other.calls == []  # waits while the composer is tokenized
    closer.join(5)
    assert other.calls == ["close"]


def test_release_leaves_a_worker_stuck_past_its_timeout_and_says_so():
    """A worker in a call that cannot be interrupted (one llama.cpp call) holds the turn lock:
    release waits its timeout, then neither saves from the engine nor closes it under the worker."""
    engine = Closing()
    gate = EngineGate(engine)  # type: ignore[arg-type]
    in_call, let_go = threading.Event(), threading.Event()

    def stuck() -> None:
        with gate.turn():
            in_call.set()
            let_go.wait(30)

    worker = threading.Thread(target=stuck)
    worker.start()
    in_call.wait(5)
    said = gate.release(lambda e: ["saved"], timeout=0.2)
    assert said == [] and gate.abandoned and engine.calls == ["stop"]
    let_go.set()
    worker.join(5)
    assert not worker.is_alive() and engine.calls == ["stop"]


class Host(App[None]):
    """The least a controller needs: ChatHost's members, drawn into a transcript and a composer
    this host keeps (no controller ever sees them)."""

    def __init__(self, engine) -> None:
        super().__init__()
        self.gate = EngineGate(engine)
        self.settings = SETTINGS
        self.session_busy = False
        self.attaching = False
        self.generating = False
        self.loading_model = False
        self.status = ""
        self.session_name = None
        self.attached = ()
        self.branch = ShownBranch()
        self.neighbours = None
        self.busy_with: list[str] = []
        self.shown = 0
        self.transcript, self.composer = Transcript(), Composer()
        self.controller = AttachController(self)

    @property
    def engine(self):
        return self.gate.engine

    def busy(self, what: str) -> bool:
        self.busy_with.append(what)
        return False

    def show_attachments(self) -> None:
        self.shown += 1

    async def show_path(self, path, dropped=0, select=None, *, anew=False) -> None:
        await self.transcript.show_path(path, dropped)

    async def add_notice(self, line: str, kind: str = "info") -> None:
        await self.transcript.add_notice(line, kind)

    async def show_sources(self, context) -> None:
        await self.transcript.show_sources(context)

    def selection(self):
        return self.transcript.selection()

    def step_selection(self, step: int) -> None:
        self.transcript.select_step(step)

    def edit_text(self, text: str, *, only_if_empty: bool = False) -> None:
        if not (only_if_empty and self.composer.text.strip()):
            self.composer.load_text(text)

    def focus_composer(self) -> None:
        self.composer.focus()

    def mark_composer(self, line) -> None:
        self.composer.border_title = line

    def compose(self) -> ComposeResult:
        yield self.transcript
        yield self.composer

    def on_attached(self, message: Attached) -> None:
        self.run_worker(self.controller.attached(message))

    def on_attach_failed(self, message: AttachFailed) -> None:
        self.controller.attach_failed(message)


def host_members() -> set[str]:
    declared = {name for name in vars(ChatHost) if not name.startswith("_")}
    return declared | set(ChatHost.__annotations__)


def lacks(host: object) -> set[str]:
    """The ChatHost members `host` does not have, read without calling any property."""
    return {name for name in host_members() if name not in dir(type(host)) and name not in vars(host)}


def test_chat_app_and_the_small_host_are_chat_hosts(engine):
    from chatapp.ui.app import ChatApp

    app = ChatApp(engine, settings=SETTINGS)
    try:
        assert {"gate", "engine", "busy", "show_attachments", "branch", "show_path"} <= host_members()
        assert "query_one" not in host_members()  # no controller is handed the widget tree
        assert lacks(app) == set() and lacks(Host(engine)) == set()
        assert lacks(App()) >= {"gate", "busy", "settings"}  # the check can fail: a bare App is no host
    finally:
        app.release_engine()


async def test_the_attach_controller_runs_on_a_small_host(engine):
    host, seen = Host(engine), Messages()
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
