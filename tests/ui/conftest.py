"""The App for the UI tests: built around a real Engine on the default model, with the opener a
model switch uses; every app's engine is released (its session saved) after the test.

A module (or a test) whose assertions depend on other settings says so with a marker, which
make_app reads: `pytestmark = pytest.mark.app_settings(max_tokens=16, opener=None)`. Any
setting may be given; `opener=None` builds an app that cannot switch models, and `threads=0`
one on Settings' own thread count (every physical core)."""

from __future__ import annotations

import pytest

from chatapp.config import Settings
from chatapp.engine.opening import open_engine
from chatapp.ui.app import ChatApp
from tests.ui._helpers import Messages

BASE = {"n_ctx": 1024, "temperature": 0.0, "max_tokens": 24, "threads": 2}
"""What every app gets unless its module, its test or the call says otherwise."""


def pytest_configure(config) -> None:
    config.addinivalue_line("markers", "app_settings(**overrides): the settings make_app builds the apps with "
                                       "(over tests/ui/conftest.py's BASE; opener=None: no model switch)")


@pytest.fixture
def make_app(request, default_model_path):
    """make_app(session=None, **overrides) -> (ChatApp, Messages): the settings are BASE, then the
    closest app_settings marker, then `overrides`."""
    marker = request.node.get_closest_marker("app_settings")
    preset = dict(marker.kwargs) if marker is not None else {}
    apps: list[ChatApp] = []

    def make(session: str | None = None, **overrides) -> tuple[ChatApp, Messages]:
        values = {**BASE, **preset, **overrides}
        opener = values.pop("opener", open_engine)
        settings = Settings().replace(**values)
        app = ChatApp(open_engine(settings, str(default_model_path)), settings=settings, session=session,
                      opener=opener)
        apps.append(app)
        return app, Messages()

    yield make
    for app in apps:
        app.release_engine()


@pytest.fixture
def app(make_app) -> ChatApp:
    """One app, as make_app builds it, for tests that watch no messages of their own."""
    return make_app()[0]
