"""Resuming a session whose transcript is far larger than the context, on the real default model.

What resume tokenizes is counted (the backend's tokenizer, wrapped): it must be bounded by what
the context could hold, not by the transcript. benchmarks/huge_session.py measures the time and
memory this saves; no test here times anything.
"""

from __future__ import annotations

import threading

import pytest

from chatapp.engine.events import Message
from chatapp.engine.sessions import SessionManager
from chatapp.engine.sessions.manager import OpeningStopped
from chatapp.engine.sessions.window import MAX_CHARS_PER_TOKEN, earliest_start
from chatapp.engine.sessions.store import ModelIdentity, Snapshot

from .session_helpers import SETTINGS, open_engine, run_turn

N_CTX = 1024
HUGE = "The keeper climbed the stairs at dusk and wrote the weather in the log. " * 140_000  # 10 MB
SMALL = [Message("user", "Name a colour."), Message("assistant", "Blue.")]


@pytest.fixture(scope="module")
def engine(default_model_path):
    engine = open_engine(default_model_path, n_ctx=N_CTX)
    yield engine
    engine.close()


@pytest.fixture
def tokenized(engine, monkeypatch) -> list[int]:
    """The length of every text the backend is asked to tokenize."""
    backend = engine._backend  # test-only introspection: count what reaches the tokenizer
    seen: list[int] = []
    original = backend.tokenize_prompt

    def counting(text: str) -> list[int]:
        seen.append(len(text))
        return original(text)

    monkeypatch.setattr(backend, "tokenize_prompt", counting)
    return seen


def save(manager: SessionManager, messages: list[Message], window_start: int = 1) -> None:
    model = ModelIdentity("smollm2-135m-instruct", "/m.gguf", "ab" * 32, "Q4_1")
    manager.store.save(Snapshot("big", model, messages, window_start, 0))


def test_a_message_larger_than_the_context_is_never_tokenized_and_nothing_is_lost(engine, tokenized, tmp_path):
    manager = SessionManager.open(SETTINGS, tmp_path)
    messages = [Message("system", SETTINGS.system_prompt), Message("user", HUGE), Message("assistant", "Noted."),
                *SMALL]
    save(manager, messages)  # its window says the huge turn is in the context: as edited, not as chatapp saves

    live = manager.resume("big", engine)
    assert engine.messages == messages, "the transcript is loaded whole"
    assert engine.window_start == 3  # the huge turn can't fit; the last one does
    assert live.report.fallback == "the transcript from its saved window on is longer than the context can hold"
    assert live.report.turns_back == -1 and 0 < live.report.reprefill_tokens < N_CTX
    assert max(tokenized) < N_CTX * MAX_CHARS_PER_TOKEN < len(HUGE)

    record = run_turn(engine, "And another?")
    assert record.prompt_tokens < N_CTX and record.reply
    live.save_turn(record)
    stored = manager.store.get("big").messages
    assert stored[1].content == HUGE and stored[:5] == messages and stored[5].content == "And another?"


def test_many_turns_beyond_the_context_cost_only_what_fits(engine, tokenized, tmp_path):
    manager = SessionManager.open(SETTINGS, tmp_path)
    turn = [Message("user", "Tell me about lighthouses. " * 2000), Message("assistant", "They guide ships. " * 2000)]
    messages = [Message("system", SETTINGS.system_prompt), *turn * 200, *SMALL]  # 200 turns of ~90 KB
    save(manager, messages)
    live = manager.resume("big", engine)
    assert engine.messages == messages and engine.window_start == len(messages) - 2
    assert live.report.turns_back == -200
    assert max(tokenized) < N_CTX * MAX_CHARS_PER_TOKEN


def test_earlier_turns_that_fit_still_come_back(engine, tmp_path):
    """The bound only skips what can't fit: a window saved too late (a smaller context's) is
    placed anew over every turn that does."""
    manager = SessionManager.open(SETTINGS, tmp_path)
    turns = [Message(role, f"{role} {i}: short.") for i in range(6) for role in ("user", "assistant")]
    messages = [Message("system", SETTINGS.system_prompt), *turns]
    save(manager, messages, window_start=len(messages) - 2)
    live = manager.resume("big", engine)
    assert engine.window_start == 1 and live.report.turns_back == 5


def test_earliest_start_is_a_turn_boundary():
    system = Message("system", "s")
    big, small = Message("user", "x" * 300), Message("assistant", "y")
    messages = [system, big, small, Message("user", "q"), small]
    assert earliest_start(messages, n_ctx=1) == 3  # 300 characters are more than 1 token can hold
    assert earliest_start(messages, n_ctx=2) == 1
    assert earliest_start([system, big], n_ctx=1) == 2  # nothing fits: no turn
    assert earliest_start([], n_ctx=1) == 0


def test_a_stop_during_opening_ends_it_and_writes_nothing(engine, tmp_path):
    manager = SessionManager.open(SETTINGS, tmp_path)
    save(manager, [Message("system", SETTINGS.system_prompt), *SMALL])
    before = manager.store.get("big")
    stop = threading.Event()
    stop.set()
    with pytest.raises(OpeningStopped, match="stopped while opening session 'big'; nothing was sent or saved"):
        manager.resume("big", engine, stop=stop)
    assert manager.store.get("big") == before
