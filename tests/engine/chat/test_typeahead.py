"""Prefill while typing (chatapp.engine.chat.typeahead) on the real default model: the cache
stays a prefix of the prompt the text in the composer would send, whatever the typing does,
and replies are the same as without it."""

from __future__ import annotations

import threading
import time

import pytest

from chatapp.config import Settings
from chatapp.engine.chat.typeahead import GAVE_WAY, SMALL_MIN, next_question
from chatapp.engine.local.threads import LOAD_EVERY_S, OtherLoad
from chatapp.engine.opening import open_engine
from tests.engine.chat.typeahead_texts import FOLLOW_UP, QUESTION

pytestmark = pytest.mark.usefixtures("quiet_machine")


@pytest.fixture
def open_greedy(default_model_path):
    engines = []

    def make(**overrides):
        settings = Settings().replace(**{"n_ctx": 2048, "temperature": 0.0, "max_tokens": 32, "threads": 2,
                                         **overrides})
        engine = open_engine(settings, str(default_model_path))
        engines.append(engine)
        return engine

    yield make
    for engine in engines:
        engine.close()


def typed(text: str, step: int = 9) -> list[str]:
    """The composer's text at each pause while `text` is typed."""
    return [text[:end] for end in range(step, len(text), step)] + [text]


def type_into(engine, texts, stop: threading.Event | None = None) -> None:
    for text in texts:
        list(engine.type_ahead(text, stop or threading.Event()))
        if engine.settings.prefill_while_typing:
            # Off, typing touches nothing: the cache keeps the last reply as generated, which need
            # not be a prefix (a reply ending in "\n\n" is rendered without it), and the turn cuts it.
            assert_consistent(engine, text)


def assert_consistent(engine, text: str) -> None:
    """The cache holds a prefix of the next prompt for `text`, and nothing else."""
    prompt = engine.prompt_ids(next_question(engine.context_messages(), text))
    cached = engine.cached_tokens()
    assert prompt[:len(cached)] == cached, f"the cache is not a prefix of the next prompt for {text!r}"


def chat(engine, questions, typing: bool) -> list:
    records = []
    for question in questions:
        if typing:
            type_into(engine, typed(question))
        records.append(list(engine.send(question))[-1].record)
    return records


def test_greedy_replies_are_the_same_with_and_without_it(open_greedy):
    on = chat(open_greedy(), [QUESTION, FOLLOW_UP], typing=True)
    off = chat(open_greedy(prefill_while_typing=False), [QUESTION, FOLLOW_UP], typing=True)
    assert [r.reply for r in on] == [r.reply for r in off]
    assert all(r.prefilled_while_typing == 0 for r in off)
    assert all(r.prefilled_while_typing > 0 for r in on)


def test_the_record_counts_what_was_typed_ahead(open_greedy):
    engine = open_greedy()
    first = chat(engine, [QUESTION], typing=False)[0]
    assert first.prefilled_while_typing == 0
    kept = len(engine.cached_tokens())
    type_into(engine, typed(FOLLOW_UP))
    ahead = len(engine.cached_tokens())
    record = list(engine.send(FOLLOW_UP))[-1].record
    assert record.cached_tokens == ahead  # what was in the cache at Enter, typed-ahead included
    # the text sent is the text last typed: its whole prompt was prefilled, the first token's
    # logits with it, so nothing is left after Enter
    assert record.cached_tokens == record.prompt_tokens and record.prefill_tokens == 0
    # the conversation's part came from the turn before, the rest from typing
    assert 0 < record.prefilled_while_typing <= record.cached_tokens
    assert record.cached_tokens - record.prefilled_while_typing <= kept
    assert record.prefilled_while_typing >= len(engine.tokenize(FOLLOW_UP)) - 5


def test_a_question_sent_with_more_than_was_typed_ahead_prefills_only_the_rest(open_greedy):
    """The guess that the typed text was finished is cut back when Enter sends more; the rest of
    the prompt goes in at least SMALL_MIN tokens at a time, and the reply is the one without typing."""
    engine = open_greedy()
    chat(engine, [QUESTION], typing=False)
    type_into(engine, typed(FOLLOW_UP[:-12]))
    record = list(engine.send(FOLLOW_UP))[-1].record
    assert SMALL_MIN <= record.prefill_tokens <= 30
    assert record.prefill_tokens == record.prompt_tokens - record.cached_tokens
    plain = open_greedy(prefill_while_typing=False)
    chat(plain, [QUESTION], typing=False)
    assert list(plain.send(FOLLOW_UP))[-1].record.reply == record.reply


def test_edits_deletions_and_pastes_keep_the_cache_a_prefix_of_the_prompt(open_greedy):
    engine = open_greedy()
    chat(engine, [QUESTION], typing=False)
    type_into(engine, typed("Which of those grow well in pots on a bal"))
    type_into(engine, ["Which of those grow well in pots on a balc", "Which of those grow well in pots on a ba"])
    edited = "Which of these grow well in pots on a ba"  # an edit near the start
    type_into(engine, [edited])
    # cut back to the edit, then the edited text's whole prompt again (the guess that it is finished)
    assert engine.cached_tokens() == engine.prompt_ids(next_question(engine.context_messages(), edited))
    type_into(engine, [""])  # everything deleted: back to the conversation and the next opening
    opening = engine.prompt_ids(next_question(engine.context_messages(), ""))
    assert len(engine.cached_tokens()) < len(opening)
    type_into(engine, [FOLLOW_UP * 3])  # a paste
    assert len(engine.cached_tokens()) > len(opening) + SMALL_MIN
    reply = list(engine.send(FOLLOW_UP))[-1].record.reply  # another text is sent after all
    plain = open_greedy(prefill_while_typing=False)
    chat(plain, [QUESTION], typing=False)
    assert reply == list(plain.send(FOLLOW_UP))[-1].record.reply


def test_a_stop_mid_way_leaves_a_prefix_and_the_same_reply(open_greedy):
    engine = open_greedy()
    stop = threading.Event()
    seen = []
    for state in engine.type_ahead(QUESTION * 2, stop):
        seen.append(state)
        stop.set()  # as Enter does between two batches; llama.cpp's abort callback cuts one mid-way
    assert len(seen) >= 1 and seen[0].ready < seen[0].total
    assert_consistent(engine, QUESTION)
    stopped_at_once = threading.Event()
    stopped_at_once.set()
    assert list(engine.type_ahead(QUESTION, stopped_at_once)) == []
    record = list(engine.send(QUESTION))[-1].record
    plain = open_greedy(prefill_while_typing=False)
    assert record.reply == list(plain.send(QUESTION))[-1].record.reply


def test_off_leaves_the_cache_alone(open_greedy):
    engine = open_greedy(prefill_while_typing=False)
    chat(engine, [QUESTION], typing=False)
    before = engine.cached_tokens()
    assert list(engine.type_ahead(FOLLOW_UP, threading.Event())) == []
    assert engine.cached_tokens() == before


def test_a_question_too_long_for_the_context_is_not_prefilled(open_greedy):
    engine = open_greedy(n_ctx=256, max_tokens=32)
    states = list(engine.type_ahead(QUESTION * 4, threading.Event()))
    assert engine.cached_tokens() == []
    assert states and "not fit" in states[-1].note


def test_a_busy_machine_is_given_way_to_and_the_state_says_so(open_greedy, monkeypatch):
    engine = open_greedy()
    list(engine.send(QUESTION))
    before = engine.cached_tokens()
    monkeypatch.setattr(OtherLoad, "sample", lambda self: 64.0)  # every core busy with other programs
    time.sleep(LOAD_EVERY_S + 0.1)  # the load is read at most this often
    states = list(engine.type_ahead(FOLLOW_UP, threading.Event()))
    assert states and states[-1].note == GAVE_WAY and states[-1].prefilled == 0
    assert_consistent(engine, FOLLOW_UP)
    assert len(engine.cached_tokens()) <= len(before)
    monkeypatch.setattr(OtherLoad, "sample", lambda self: 0.0)  # free again: the next pause prefills
    time.sleep(LOAD_EVERY_S + 0.1)
    states = list(engine.type_ahead(FOLLOW_UP, threading.Event()))
    assert states[-1].note == "" and states[-1].prefilled > 0
