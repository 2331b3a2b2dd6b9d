"""The llama-server backend under the engine when the server stalls or answers a slot action
wrongly, through tests/remote/rewriting_proxy.py in front of the session's real llama-server.

Requests other than the reply stream have deadlines of seconds (Timeouts); these tests make
them shorter still, so a stalled server is given up on without a long wait.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from chatapp.engine.chat.engine import Engine
from chatapp.engine.events import TurnDone
from chatapp.engine.server.answers import WrongAnswer
from chatapp.engine.server.backend import ServerBackend, SlotFileError
from chatapp.engine.server.http import Timeouts
from chatapp.errors import ServerError

from .conftest import SETTINGS
from .rewriting_proxy import HOLD, Reply, RewritingProxy

SHORT = Timeouts(request=3.0, slot=2.0)


@pytest.fixture
def engine(proxy: RewritingProxy) -> Iterator[Engine]:
    engine = Engine(ServerBackend.connect(proxy.url, timeouts=SHORT), SETTINGS)
    engine.clear_cache()
    yield engine
    engine.close()


def one_turn(engine: Engine) -> None:
    events = list(engine.send("Name a fruit."))
    assert isinstance(events[-1], TurnDone) and events[-1].record.reply


def test_a_slot_restore_that_is_never_answered_falls_back(engine, proxy):
    one_turn(engine)
    state = engine.save_cache("held")
    proxy.answers["/slots/0?action=restore"] = lambda ask: HOLD
    assert engine.restore_cache(state, len(state.tokens)) is False
    assert engine.cached_tokens() == []


def test_a_slot_save_that_is_never_answered_is_not_saved(engine, proxy):
    one_turn(engine)
    proxy.answers["/slots/0?action=save"] = lambda ask: HOLD
    with pytest.raises(SlotFileError, match=r"did not answer /slots/0\?action=save within 2 s"):
        engine.save_cache("held")


def dribble(ask):
    """A byte now and then, for ever: each read succeeds, the answer never ends."""
    return Reply(200, (b" " if i % 2 == 0 else 0.5 for i in range(10**6)))


@pytest.mark.parametrize("rule", [lambda ask: HOLD, dribble], ids=["silent", "dribbling"])
def test_a_tokenize_that_never_ends_is_given_up_on(engine, proxy, rule):
    proxy.answers["/tokenize"] = rule
    with pytest.raises(ServerError, match=r"did not answer /tokenize within 3 s"):
        engine.tokenize("Hello there")


@pytest.mark.parametrize("answer", [{"n_saved": "many"}, [1]], ids=["n_saved-a-string", "a-list"])
def test_a_slot_save_of_the_wrong_shape_is_no_missing_file(engine, proxy, answer):
    one_turn(engine)
    proxy.answers["/slots/0?action=save"] = lambda ask: answer
    with pytest.raises(WrongAnswer, match=r"/slots/0\?action=save did not answer as a llama-server: "):
        engine.save_cache("wrong")


def test_a_slot_restore_of_the_wrong_shape_says_so(engine, proxy):
    one_turn(engine)
    state = engine.save_cache("wrong")
    proxy.answers["/slots/0?action=restore"] = lambda ask: {"n_restored": -3}
    with pytest.raises(WrongAnswer, match=r"n_restored: expected `int` >= 0"):
        engine.restore_cache(state, len(state.tokens))
