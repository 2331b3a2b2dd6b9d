"""What the controller tests share: an engine on the real default model, and a small host App
(small_host.Host) to run one controller on; every host's engine is released after the test."""

from __future__ import annotations

import pytest

from chatapp.engine.opening import open_engine
from tests.ui.controllers.small_host import SETTINGS, Host


@pytest.fixture
def engine(default_model_path):
    """Closed through the gate of the host it is given to (the test's, or make_host's at the end)."""
    return open_engine(SETTINGS, str(default_model_path))


@pytest.fixture
def make_host(engine):
    """make_host(controller) -> a Host on `engine` whose controller is `controller(host)`."""
    hosts: list[Host] = []

    def make(controller=None, **kwargs) -> Host:
        host = Host(engine, controller, **kwargs)
        hosts.append(host)
        return host

    yield make
    for host in hosts:
        host.gate.release(lambda e: [], timeout=5)
    if not hosts:
        engine.close()
