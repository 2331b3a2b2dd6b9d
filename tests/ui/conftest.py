"""The App for the UI tests: built around a real Engine on the default model, with the opener a
model switch uses; every app's engine is released (its session saved) after the test."""

from __future__ import annotations

import pytest

from chatapp.config import Settings
from chatapp.engine.opening import open_engine
from chatapp.ui.app import ChatApp
from tests.ui._helpers import Messages


@pytest.fixture
def make_app(default_model_path):
    apps: list[ChatApp] = []

    def make(session: str | None = None, **overrides) -> tuple[ChatApp, Messages]:
        settings = Settings().replace(**{"n_ctx": 1024, "temperature": 0.0, "max_tokens": 24, "threads": 2,
                                         **overrides})
        app = ChatApp(open_engine(settings, str(default_model_path)), settings=settings, session=session,
                      opener=open_engine)
        apps.append(app)
        return app, Messages()

    yield make
    for app in apps:
        app.release_engine()
