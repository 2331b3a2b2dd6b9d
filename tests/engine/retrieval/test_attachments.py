"""An AttachmentSet: whole or chunked, what each turn gets, and the prompt the model really sees."""

from __future__ import annotations

import json

import pytest

from chatapp.engine.backend import GenerationSettings
from chatapp.engine.events import Message, TurnDone
from chatapp.engine.local.llama import LlamaRuntime, LoadOptions
from chatapp.engine.retrieval.attachments import AttachmentSet, Sizing
from chatapp.engine.retrieval.context import (
    QUESTION, RetrievedContext, message_content, placed_keys, prompt_spans, tokens_within)
from chatapp.engine.retrieval.document import Attachment
from chatapp.engine.retrieval.index import fold_plurals
from chatapp.engine.tokens import describe, joined
from chatapp.errors import AttachmentError
from tests.engine.conftest import make_engine
from tests.engine.retrieval.conftest import DOCS

NOTES = "The staging server is called heron.\nIt listens on port 8443.\n"


@pytest.fixture
def notes(tmp_path):
    path = tmp_path / "notes.txt"
    path.write_text(NOTES)
    return path


def test_sizing_is_a_quarter_of_the_context_after_the_reply_reserve():
    sizing = Sizing(n_ctx=4096, reserve=512)
    assert (sizing.usable, sizing.whole_limit, sizing.turn_budget) == (3584, 896, 896)
    assert (sizing.chunk_min, sizing.chunk_max) == (200, 400)
    small = Sizing(n_ctx=1024, reserve=256)
    assert (small.turn_budget, small.chunk_min, small.chunk_max) == (192, 48, 96)


def test_small_files_go_in_whole_while_together_they_fit_a_quarter(count_tokens, tmp_path):
    names = ("a.txt", "b.txt", "c.txt")
    for name in names:
        (tmp_path / name).write_text(name + " " + " ".join(f"word{i}" for i in range(120)) + "\n")
    attachments = AttachmentSet(count_tokens, n_ctx=4096, reserve=512)
    for name in names:
        attachments.attach(tmp_path / name)
    tokens = count_tokens((tmp_path / "a.txt").read_text())
    assert 3 * tokens > 896 >= 2 * tokens  # so the third no longer fits whole
    assert [p.whole for p in attachments.plans] == [True, True, False]
    assert len(attachments.plans[2].chunks) >= 1
    attachments.remove("a.txt")
    assert [p.whole for p in attachments.plans] == [True, True]


def test_a_whole_file_is_placed_once_and_then_stays_in_the_conversation(count_tokens, notes):
    attachments = AttachmentSet(count_tokens, n_ctx=4096, reserve=512)
    report = attachments.attach(notes)
    assert [(p.attachment.name, p.whole) for p in report.added] == [("notes.txt", True)]
    context = attachments.retrieve("Which port does heron listen on?")
    assert context.text.endswith(QUESTION)
    assert "[notes.txt, whole file]\n" + NOTES in context.text
    assert context.to_json() == [{"file": "notes.txt", "start_line": 1, "end_line": 2,
                                  "tokens": count_tokens(NOTES), "score": None}]
    first = Message("user", "Which port does heron listen on?", context=context)
    assert attachments.retrieve("And its name?", placed_keys([first])) is None
    assert attachments.retrieve("And its name?", placed_keys([])) is not None  # that turn was dropped


def test_each_turn_gets_the_best_chunks_that_fit_its_budget(count_tokens):
    attachments = AttachmentSet(count_tokens, n_ctx=4096, reserve=512)
    attachments.attach(DOCS)
    question = "How do I make the context window larger when creating a Llama object?"
    context = attachments.retrieve(question)
    assert count_tokens(context.text) <= attachments.sizing.turn_budget
    first = context.entries[0]
    assert (first.file, first.section) == ("docs/llama-cpp-python.md", "Adjusting the Context Window")
    assert f'[docs/llama-cpp-python.md, lines {first.start_line}-{first.end_line}, "Adjusting the Context Window"]' \
        in context.text
    scores = [e.score for e in context.entries]
    assert scores == sorted(scores, reverse=True) and all(s > 0 for s in scores)
    for entry in context.entries:
        assert set(entry.to_json()) == {"file", "start_line", "end_line", "tokens", "score"}
    # The next turn does not place again what this one placed.
    again = attachments.retrieve(question, placed_keys([Message("user", question, context=context)]))
    assert not {e.key for e in again.entries} & {e.key for e in context.entries}


def test_a_question_with_no_word_in_common_gets_nothing(count_tokens):
    attachments = AttachmentSet(count_tokens, n_ctx=4096, reserve=512)
    attachments.attach(DOCS)
    assert attachments.retrieve("Quokkas?") is None


def test_attaching_is_all_or_nothing(count_tokens, notes, tmp_path):
    attachments = AttachmentSet(count_tokens, n_ctx=4096, reserve=512)
    attachments.attach(notes)
    with pytest.raises(AttachmentError):
        attachments.attach(tmp_path / "missing.md")
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("different text\n")
    with pytest.raises(AttachmentError, match="an attachment named notes.txt is attached already"):
        attachments.attach(other / "notes.txt")
    assert attachments.attach(notes).notices == ("notes.txt is attached already",)
    with pytest.raises(AttachmentError, match="nothing named nope.md is attached"):
        attachments.remove("nope.md")
    assert [a.name for a in attachments.attachments] == ["notes.txt"]


def test_a_restored_set_retrieves_the_same_chunks(count_tokens):
    attachments = AttachmentSet(count_tokens, n_ctx=4096, reserve=512)
    attachments.attach(DOCS)
    question = "How do I read the battery status and fan speeds with psutil?"
    records = json.loads(json.dumps([a.to_record() for a in attachments.attachments]))
    restored = AttachmentSet(count_tokens, 4096, 512, [Attachment.from_record(r) for r in records])
    context = attachments.retrieve(question)
    assert restored.retrieve(question) == context
    assert RetrievedContext.from_record(json.loads(json.dumps(context.to_record()))) == context


def test_plurals_fold_as_harman_s_stemmer_says():
    words = ["queries", "series", "does", "shoes", "bees", "horses", "status", "glass", "extras", "requires"]
    assert fold_plurals(words) == ["query", "sery", "doe", "shoe", "bee", "horse", "status", "glass",
                                   "extra", "require"]


def test_the_prompt_the_model_sees_holds_the_block_before_the_question(default_model_path, count_tokens):
    runtime = LlamaRuntime(default_model_path, LoadOptions(n_ctx=2048))
    try:
        chat = make_engine(runtime, "You are a concise assistant.", GenerationSettings(temperature=0.0, max_tokens=16))
        attachments = AttachmentSet(count_tokens, runtime.n_ctx, reserve=16)
        attachments.attach(DOCS)
        question = "How do I disable Rich globally in Typer?"
        context = attachments.retrieve(question, placed_keys(chat.context_messages()))
        assert "TYPER_USE_RICH" in context.text
        chat.load_conversation(chat.messages + [Message("user", question, context=context)])
        content, span = message_content(question, context)
        assert content[slice(*span)] == context.text and content[span[1]:] == question
        events = list(chat.regenerate())  # answers the last user message: this one
        record = events[-1].record
        assert isinstance(events[-1], TurnDone) and record.prompt_tokens > count_tokens(context.text)

        # Read the prompt back from the cache's own tokens.
        tokens = describe(runtime, runtime.kv_tokens[: record.prompt_tokens])
        seen = joined(tokens)
        assert context.text + question in seen
        prompt = chat.render(chat.context_messages()[:-1])
        offset = -len(tokens[0].piece) if not prompt.startswith(tokens[0].piece) else 0
        mask = tokens_within([t.piece for t in tokens], prompt_spans(prompt, chat.context_messages()[:-1]), offset)
        retrieved = "".join(t.piece for t, inside in zip(tokens, mask) if inside)
        assert retrieved == context.text
        assert abs(sum(mask) - count_tokens(context.text)) <= 1  # a token may straddle the block's end
    finally:
        runtime.close()


@pytest.mark.unmeasured_machine  # tmp_path is the folder it attaches: no cache seeded in it
def test_the_same_text_in_two_files_is_placed_once(count_tokens, tmp_path):
    licence = ("Licensed under the Apache License, Version 2.0; you may not use these files except in "
               "compliance with the License. They are distributed on an AS IS basis, without warranties "
               "or conditions of any kind, either express or implied. " * 3)
    for name, topic in (("parser.md", "tokens"), ("printer.md", "pages")):
        body = "\n\n".join(f"The {topic} handler number {i} keeps every non-empty item it is given."
                           for i in range(25))
        (tmp_path / name).write_text(f"# Licence\n\n{licence}\n\n# Handlers\n\n{body}\n")
    attachments = AttachmentSet(count_tokens, n_ctx=2048, reserve=256)
    attachments.attach(tmp_path)
    assert not any(p.whole for p in attachments.plans)
    first, second = (p.chunks[0] for p in attachments.plans)
    assert first.text == second.text and 2 * first.tokens + 100 < attachments.sizing.turn_budget  # both fit
    context = attachments.retrieve("Under which licence may I use these files?")
    assert [e.section for e in context.entries][:1] == ["Licence"]
    assert context.text.count(first.text) == 1
