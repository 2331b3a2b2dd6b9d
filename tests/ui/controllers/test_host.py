"""The engine gate, and the host protocol: ChatApp and the small host App the controller tests
run each controller on (small_host.Host) are both a `ChatHost`, and no controller is handed the
widget tree (the controllers, one module each, are tested beside this one)."""

from __future__ import annotations

import threading
import time

from textual.app import App

from chatapp.ui.host import EngineGate
from tests.ui.controllers.small_host import SETTINGS, Host, host_members, lacks


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


def test_the_small_host_is_what_each_controller_asks_of_its_host(engine):
    from chatapp.ui.controllers.branches import BranchHost
    from chatapp.ui.controllers.confidence import ConfidenceHost
    from chatapp.ui.controllers.models import ModelHost
    from chatapp.ui.controllers.theme_picker import ThemeHost
    from chatapp.ui.controllers.typing_prefill import TypingHost

    host = Host(engine)
    try:
        for protocol in (BranchHost, ConfidenceHost, ModelHost, ThemeHost, TypingHost):
            assert lacks(host, protocol) == set(), protocol.__name__
        assert lacks(App(), TypingHost) >= {"composer_tokens", "typed_ahead", "composer_text"}
    finally:
        host.gate.release(lambda e: [], timeout=5)
