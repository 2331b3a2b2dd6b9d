"""What the widget tests share: the shipped themes, and real-model turns to feed the panels,
each run once per module (a host App per test draws them; see hosts.py)."""

from __future__ import annotations

import pytest

from chatapp.config import Settings
from chatapp.engine.events import TurnDone
from chatapp.engine.opening import open_engine
from chatapp.ui.themes import load_themes
from chatapp.ui.shown import VIEW_CANDIDATES
from tests.engine.local.speculative import PROMPTS
from tests.ui.drafting import drafting_engine
from tests.ui.widgets.hosts import SETTINGS, Session, run_turn


@pytest.fixture(scope="module")
def session(default_model_path):
    engine = open_engine(SETTINGS, str(default_model_path))
    turns = [run_turn(engine, "Hello there, who are you?"), run_turn(engine, "Tell me a joke.")]
    engine.set_system_prompt("You answer in one word.")
    turns.append(run_turn(engine, "Why?"))
    yield Session(engine, turns)
    engine.close()


@pytest.fixture(scope="module")
def themes(tmp_path_factory):
    return load_themes(user_dir=tmp_path_factory.mktemp("no-user-themes"))


CONFIDENCE_SETTINGS = Settings(n_ctx=1024, temperature=1.0, seed=21, max_tokens=24)


@pytest.fixture(scope="module")
def turn(default_model_path):
    engine = open_engine(CONFIDENCE_SETTINGS, str(default_model_path))
    engine.set_generation(logprobs=VIEW_CANDIDATES)
    found = run_turn(engine, "Invent a name for a cat.")
    yield found
    engine.close()


@pytest.fixture(scope="module")
def drafted_turn(default_model_path):
    """A copy-heavy turn with drafting: its events, record and token view."""
    engine = drafting_engine(default_model_path)
    events = list(engine.send(PROMPTS["copy"]))
    done = events[-1]
    assert isinstance(done, TurnDone)
    view, summary = done.view, engine.summary
    engine.close()
    return events, done.record, view, summary
