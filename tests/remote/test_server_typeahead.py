"""Prefill while typing over a llama-server: the slot's prompt cache is filled ahead (requests
with n_predict 0 and cache_prompt), and the turn's own figures, the server's, show it reused."""

from __future__ import annotations

import threading

from chatapp.engine.chat.typeahead import next_question
from chatapp.engine.opening import connect_engine
from tests.engine.chat.typeahead_texts import QUESTION

from .conftest import SETTINGS


def test_typing_fills_the_servers_prompt_cache_and_the_turn_reuses_it(llama_server):
    engine = connect_engine(SETTINGS.replace(server=llama_server.url))
    try:
        engine.clear_cache()
        for end in range(40, len(QUESTION), 40):
            list(engine.type_ahead(QUESTION[:end], threading.Event()))
        states = list(engine.type_ahead(QUESTION, threading.Event()))
        prompt = engine.prompt_ids(next_question(engine.context_messages(), QUESTION))
        cached = engine.cached_tokens()
        assert prompt[:len(cached)] == cached and len(prompt) - len(cached) <= 30
        assert states[-1].ready == len(cached) and states[-1].prefilled == len(cached)
        record = list(engine.send(QUESTION))[-1].record
        # the server's own count (timings.cache_n) of what it reused
        assert record.cached_tokens >= len(cached) - 1 and record.prefill_tokens <= 31
        assert record.prefilled_while_typing == record.cached_tokens
    finally:
        engine.close()


def test_a_saved_slot_holds_no_text_typed_but_never_sent(llama_server):
    """What typing prefilled past the conversation is dropped from the slot before it is saved:
    the slot file holds the conversation's tokens, not the draft's."""
    engine = connect_engine(SETTINGS.replace(server=llama_server.url, prefill_while_typing=True))
    try:
        engine.clear_cache()
        list(engine.send("Name a fruit."))
        list(engine.type_ahead(QUESTION, threading.Event()))
        figures = engine.branch_figures()
        assert engine.kv_used() > figures.cached  # typing filled the slot past the conversation
        state = engine.path_cache("typed")
        assert state.meta["slot_tokens"] <= figures.cached + 1, (state.meta, figures)
        assert len(state.tokens) <= figures.cached
        record = list(engine.send("And a colour?"))[-1].record  # the slot still serves the conversation
        assert record.cached_tokens >= figures.cached - 1
    finally:
        engine.close()
