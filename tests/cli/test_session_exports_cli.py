"""What `sessions export` and `show` write, on seeded databases (no model needed): JSON that any
strict parser reads, every branch's message written once in Markdown, and a turn record too
large to read summarized instead of parsed (and none written that large)."""

from __future__ import annotations

import json
import sqlite3
import tracemalloc

import pytest

from chatapp import paths
from chatapp.engine.chat.tree import MessageTree
from chatapp.engine.events import Message
from chatapp.engine.sessions.records import RECORD_CAP, UNREAD
from chatapp.engine.sessions.store import ModelIdentity, SessionStore, Snapshot, TurnRow

MODEL = ModelIdentity("smollm2-135m-instruct", "/m.gguf", "ab" * 32, "Q4_1")
MESSAGES = [Message("system", "Be brief."), Message("user", "Hi"), Message("assistant", "Hello!")]


def strict(text: str):
    """json.loads as RFC 8259 has it: NaN, Infinity and -Infinity are not JSON."""
    def refuse(constant: str):
        raise AssertionError(f"{constant} is not JSON")

    return json.loads(text, parse_constant=refuse)


@pytest.fixture(autouse=True)
def wide_terminal(monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")


def test_figures_that_are_not_numbers_are_exported_as_null(invoke):
    nan, inf = float("nan"), float("inf")
    record = {"reply": "Hello!", "prompt_tokens": 30, "cached_tokens": 0, "prefill_tokens": 30, "prefill_tps": inf,
              "ttft_ms": nan, "decode_tps": -inf, "logprobs": [{"id": 1, "token": "Hello", "logprob": -inf,
                                                                 "p_sampled": nan, "rank": 1, "entropy": inf,
                                                                 "top": []}]}
    SessionStore.open(paths.sessions_dir()).save(Snapshot("odd", MODEL, MESSAGES, 1, 0),
                                                 TurnRow(2, "CPU", 30, 0.0, record))
    out = invoke("sessions", "export", "odd", "--format", "json")
    assert out.exit_code == 0, out.output
    [entry] = strict(out.stdout)["journal"]
    figures = (entry["prefill_tps"], entry["ttft_ms"], entry["decode_tps"], entry["prompt_tokens"])
    assert figures == (None, None, None, 30)
    assert entry["logprobs"][0]["logprob"] is None and entry["logprobs"][0]["entropy"] is None
    markdown = invoke("sessions", "export", "odd").stdout
    row = next(line for line in markdown.splitlines() if line.startswith("| 1 |"))
    assert "nan" not in row.lower() and "inf" not in row.lower(), row


def test_an_all_branches_markdown_export_writes_each_message_once(invoke):
    """100 branches off one long path: the path is written once, each branch below its fork
    (each branch's whole path again was 13 MB for 234 KB of text)."""
    tree = MessageTree()
    parent = None
    for n in range(100):
        parent = tree.add(Message("user", f"shared question {n} " + "x" * 200), parent).id
        parent = tree.add(Message("assistant", f"shared answer {n} " + "y" * 200), parent).id
    fork = parent
    for n in range(100):
        question = tree.add(Message("user", f"branch question {n}"), fork).id
        tree.add(Message("assistant", f"branch answer {n}"), question)
    SessionStore.open(paths.sessions_dir()).save(Snapshot("wide", MODEL, [MESSAGES[0], *tree.messages()], 1, 0,
                                                          (), tree.leaf))
    out = invoke("sessions", "export", "wide", "--all-branches")
    assert out.exit_code == 0, out.output
    text = sum(len(m.content) for m in tree.messages())
    assert len(out.stdout.encode()) < 2 * text, (len(out.stdout), text)
    for message in tree.messages():
        assert out.stdout.count(f"### {message.role} {message.id}\n") == 1, message  # its heading, once
    assert out.stdout.count("shared answer 99 ") == 1 and out.stdout.count("## Branch ") == 100
    assert f"## Branch 100 (active): 202 messages, after {fork}" in out.stdout
    assert "## Branch 1: 202 messages, from the first question" in out.stdout


def test_a_record_too_long_to_read_is_summarized_from_its_row_and_never_read(invoke):
    """A record edited (or written before the cap) to 40 MB: `show` and `export` give the
    figures its row holds apart and say why, without reading it into memory."""
    store = SessionStore.open(paths.sessions_dir())
    store.save(Snapshot("big", MODEL, MESSAGES, 1, 0), TurnRow(2, "CPU", 30, 20.0, {"prompt_tokens": 30}))
    with sqlite3.connect(store.path) as conn:
        conn.execute("UPDATE turns SET record = ?", (json.dumps({"prompt_tokens": 30, "padding": "x" * (40 << 20)}),))
    tracemalloc.start()
    try:
        shown = invoke("sessions", "show", "big")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert shown.exit_code == 0, shown.output
    assert peak < 8 << 20, f"{peak:,} bytes at the peak: the record was read"
    assert "session big: turn 1's record is 40.0 MiB, more than the 16.0 MiB chatapp reads of one: only its " \
           "prefill figures are shown" in " ".join(shown.stderr.split())
    row = next(line.split() for line in shown.stdout.splitlines() if line.strip().startswith("1 "))
    assert row[:4] == ["1", "–", "–", "30"], row  # prompt and cached unknown, prefilled from the row
    [entry] = strict(invoke("sessions", "export", "big", "--format", "json").stdout)["journal"]
    assert entry[UNREAD] == len(json.dumps({"prompt_tokens": 30, "padding": "x" * (40 << 20)}))
    assert entry["prefill_tokens"] == 30 and entry["prompt_tokens"] is None


def test_a_record_over_the_cap_is_saved_without_its_token_probabilities():
    store = SessionStore.open(paths.sessions_dir())
    step = {"id": 1, "token": "x", "logprob": -0.5, "p_sampled": 0.6, "rank": 1, "entropy": 0.7,
            "top": [{"id": n, "token": "y" * 40, "logprob": -1.0, "p_sampled": 0.1} for n in range(20)]}
    steps = RECORD_CAP // len(json.dumps(step)) + 1000
    record = {"reply": "Hello!", "prompt_tokens": 30, "decode_tokens": steps, "logprobs": [step] * steps}
    store.save(Snapshot("probs", MODEL, MESSAGES, 1, 0), TurnRow(2, "CPU", 30, 20.0, record))
    with sqlite3.connect(store.path) as conn:
        (size,) = conn.execute("SELECT length(CAST(record AS BLOB)) FROM turns").fetchone()
    assert size <= RECORD_CAP
    [(_, saved)] = store.turn_records("probs")
    assert "logprobs" not in saved and saved["logprobs_dropped"] == steps
    assert (saved["prompt_tokens"], saved["decode_tokens"], saved["reply"]) == (30, steps, "Hello!")
