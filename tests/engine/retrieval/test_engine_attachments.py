"""Attachments through the Engine, on the real model: what a turn places, and the prompt it sends."""

from __future__ import annotations

import pytest

from chatapp.engine.backend import GenerationSettings
from chatapp.engine.events import ContextRetrieved, ContextTrimmed, TurnDone
from chatapp.engine.chat.prompt_view import role_counts
from chatapp.errors import AttachmentError
from tests.engine.conftest import make_engine
from tests.engine.retrieval.conftest import DOCS

NOTES = "The staging server is called heron.\nIt listens on port 8443.\n"
QUESTION = "How do I disable Rich globally in Typer?"


@pytest.fixture
def notes(tmp_path):
    path = tmp_path / "notes.txt"
    path.write_text(NOTES)
    return path


def turn(engine, text: str):
    events = list(engine.send(text))
    assert isinstance(events[-1], TurnDone)
    return events, events[-1]


def test_the_prompt_sent_holds_the_chosen_chunks_and_the_view_counts_them(runtime):
    engine = make_engine(runtime, "You are a concise assistant.")
    report = engine.attach(DOCS)
    assert [p.attachment.name for p in report.added] == [p.attachment.name for p in engine.attachments]
    assert not any(p.whole for p in engine.attachments)
    events, done = turn(engine, QUESTION)
    [retrieved] = [e for e in events if isinstance(e, ContextRetrieved)]
    context = engine.messages[-2].context
    assert retrieved.context == context and context.entries
    assert "TYPER_USE_RICH" in context.text
    assert done.record.extra["retrieved"] == context.to_json()
    assert all(set(e) == {"file", "start_line", "end_line", "tokens", "score"} for e in done.record.extra["retrieved"])

    # The prompt as the cache holds it (read back from the token view) has the block, then the question.
    prompt = done.view[: done.record.prompt_tokens]
    assert context.text + QUESTION in "".join(p.token.piece for p in prompt)
    retrieved_text = "".join(p.token.piece for p in prompt if p.role == "retrieved")
    assert retrieved_text == context.text
    chunks = {c.start_line: c for p in engine.attachments for c in p.chunks}
    for entry in context.entries:
        assert chunks[entry.start_line].text.strip("\n") in retrieved_text
    # The KV panel's "retrieved" segment is role_counts(view): the block's own token count.
    assert role_counts(done.view)["retrieved"] == len(engine.tokenize(context.text))


def test_regenerate_keeps_the_block_and_a_whole_file_is_placed_once(runtime, notes):
    engine = make_engine(runtime)
    engine.attach(notes)
    (plan,) = engine.attachments
    assert plan.whole and plan.tokens == len(engine.tokenize(NOTES))
    _, first = turn(engine, "Which port does heron listen on?")
    context = engine.messages[-2].context
    assert first.record.extra["retrieved"] == [{"file": "notes.txt", "start_line": 1, "end_line": 2,
                                                "tokens": plan.tokens, "score": None}]
    events = list(engine.regenerate())
    assert not any(isinstance(e, ContextRetrieved) for e in events)
    assert engine.messages[-2].context == context
    assert events[-1].record.extra["retrieved"] == first.record.extra["retrieved"]
    assert events[-1].record.prompt_tokens == first.record.prompt_tokens  # the same prompt again
    events, second = turn(engine, "And what is the server called?")
    assert engine.messages[-2].context is None  # the file is still in the conversation
    assert second.record.extra["retrieved"] == []
    assert not any(isinstance(e, ContextRetrieved) for e in events)


def test_a_whole_file_is_placed_again_once_its_turn_has_left_the_context(runtime, notes):
    engine = make_engine(runtime, generation=GenerationSettings(temperature=0.0, max_tokens=8))
    engine.attach(notes)
    turn(engine, "Which port does heron listen on?")
    filler = " ".join(f"item{i}" for i in range(160))
    trimmed = None
    for _ in range(6):
        events, done = turn(engine, f"Count these: {filler}")
        trimmed = next((e for e in events if isinstance(e, ContextTrimmed)), None)
        if trimmed is not None:
            break
    assert trimmed is not None and any(m.context for m in trimmed.dropped)
    assert [e.file for e in engine.messages[-2].context.entries] == ["notes.txt"]
    assert done.record.extra["retrieved"][0]["file"] == "notes.txt"


def test_bad_input_attaches_nothing_and_loses_nothing(runtime, notes, tmp_path):
    engine = make_engine(runtime)
    engine.attach(notes)
    turn(engine, "Hello")
    before = (engine.messages, engine.attachments)
    (tmp_path / "blob.bin").write_bytes(b"\x00\x01\x02" * 100)
    (tmp_path / "empty").mkdir()
    for bad in ("missing.md", "blob.bin", "empty"):
        with pytest.raises(AttachmentError):
            engine.attach(tmp_path / bad)
    with pytest.raises(AttachmentError, match="nothing named nope.md is attached"):
        engine.detach("nope.md")
    assert (engine.messages, engine.attachments) == before


def test_max_tokens_resizes_detach_stops_and_a_new_chat_starts_without(runtime, notes):
    engine = make_engine(runtime)
    engine.attach(DOCS)
    engine.set_generation(max_tokens=200)
    engine.attach(notes)  # the next use sizes the set for the new reserve
    assert engine._attached.current.sizing.reserve == 200
    engine.detach("docs/typer.md")
    assert "docs/typer.md" not in [p.attachment.name for p in engine.attachments]
    engine.new_chat()
    assert engine.attachments == ()
    _, done = turn(engine, QUESTION)
    assert "retrieved" not in done.record.extra
