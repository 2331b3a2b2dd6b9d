"""`ask --session` resumed under other settings: another --ctx, another --system.

The installed script runs each process, as a user would; the real default model answers.
What the resume notice says is checked against the prompt the next turn really prefilled,
rebuilt in-process from the saved transcript with the same model and context.
"""

from __future__ import annotations

import re
import subprocess

import pytest

from chatapp.config import Settings
from chatapp.engine.chat.engine import Engine
from chatapp.engine.opening import open_engine
from chatapp.engine.events import Message
from chatapp.engine.sessions import SessionManager
from tests.cli.conftest import records

GREEDY = ("--json", "--temperature", "0")
ANIMALS = ("Tell me about cats.", "Tell me about dogs.", "Tell me about birds.", "Tell me about fish.")
RESUMED = re.compile(r"session s: saved KV state not used \((?P<why>.+?)\); (?P<window>[^;]*; )?"
                     r"re-prefilling (?P<tokens>[\d,]+) tokens from the transcript with the next turn\n")
CAME_BACK = re.compile(r"(\d+) earlier turns? came back into the context; ")
LEFT = re.compile(r"the oldest (\d+) turns? no longer fits? and left the context; ")


def saved_messages() -> list[Message]:
    return SessionManager.open(Settings(), create=False).store.get("s").messages


def resumed(out: subprocess.CompletedProcess) -> re.Match:
    found = RESUMED.search(out.stderr)
    assert found, out.stderr
    return found


@pytest.fixture
def engine_at(default_model_path):
    """In-process engines on the default model, to count the prompts the CLI's turns had."""
    engines: list[Engine] = []

    def make(n_ctx: int, system_prompt: str = Settings().system_prompt, max_tokens: int = 24) -> Engine:
        settings = Settings(n_ctx=n_ctx, temperature=0.0, max_tokens=max_tokens, system_prompt=system_prompt)
        engines.append(open_engine(settings, str(default_model_path)))
        return engines[-1]

    yield make
    for engine in engines:
        engine.close()


def assert_prefilled_what_was_said(engine: Engine, before: list[Message], question: str, said: int,
                                   record: dict) -> None:
    """The turn after the resume prefilled its whole prompt: the transcript's `said` tokens (the
    window as placed on resume, every message of `before`), then the question."""
    prompt = engine.prompt_ids([*before, Message("user", question)])
    transcript = engine.prompt_ids(before, add_generation_prompt=False)
    assert record["cached_tokens"] == 0 and record["restored_tokens"] == 0
    assert record["prompt_tokens"] == record["prefill_tokens"] == len(prompt)
    assert said == len(transcript) and prompt[:said] == transcript
    assert record["dropped_turns"] == 0  # the resume placed the window; the turn had nothing to drop


def test_turns_a_smaller_ctx_dropped_come_back_and_the_notice_says_what_is_prefilled(chatapp_exe, engine_at):
    small = records(chatapp_exe("ask", "--session", "s", *ANIMALS, *GREEDY, "--ctx", "256", "--max-tokens", "60"))
    dropped = sum(r["dropped_turns"] for r in small)
    assert dropped >= 1  # the setting of this test: the fourth turn did not fit with the first

    out = chatapp_exe("ask", "--session", "s", "And horses?", *GREEDY, "--ctx", "2048", "--max-tokens", "20")
    [record] = records(out)
    notice = resumed(out)
    assert notice["why"] == "other n_ctx (state 256, now 2048)"
    assert CAME_BACK.fullmatch(notice["window"] or "") and int(CAME_BACK.match(notice["window"])[1]) == dropped
    messages = saved_messages()
    before = messages[:-2]  # every turn of the first run: all of them fit in 2,048
    assert [m.content for m in before if m.role == "user"] == list(ANIMALS)
    assert_prefilled_what_was_said(engine_at(2048), before, "And horses?", int(notice["tokens"].replace(",", "")),
                                   record)

    # The window saved now holds every turn: the next process restores the state as usual.
    [again] = records(chatapp_exe("ask", "--session", "s", "And cows?", *GREEDY, "--ctx", "2048",
                                  "--max-tokens", "20"))
    assert again["restored_tokens"] > 0 and again["cached_tokens"] >= again["restored_tokens"]


def test_turns_that_no_longer_fit_a_smaller_ctx_leave_on_resume_and_the_figure_stays_true(chatapp_exe, engine_at):
    records(chatapp_exe("ask", "--session", "s", *ANIMALS, *GREEDY, "--ctx", "2048", "--max-tokens", "60"))

    out = chatapp_exe("ask", "--session", "s", "And pigs?", *GREEDY, "--ctx", "256", "--max-tokens", "20")
    [record] = records(out)
    notice = resumed(out)
    assert notice["why"] == "other n_ctx (state 2048, now 256)"
    left = LEFT.fullmatch(notice["window"] or "")
    assert left, notice["window"]
    messages = saved_messages()
    kept_from = 1 + 2 * int(left[1])  # the system prompt, then the turns that left
    assert messages[0].role == "system" and messages[kept_from].role == "user"
    before = [messages[0], *messages[kept_from:-2]]
    assert_prefilled_what_was_said(engine_at(256), before, "And pigs?", int(notice["tokens"].replace(",", "")),
                                   record)


def test_system_on_an_existing_session_applies_from_that_turn_and_says_what_is_prefilled(chatapp_exe, engine_at):
    pirate = "You are a pirate. Answer like one."
    records(chatapp_exe("ask", "--session", "s", "Name a colour.", *GREEDY, "--max-tokens", "24"))

    out = chatapp_exe("ask", "--session", "s", "--system", pirate, "Name another one.", *GREEDY,
                      "--max-tokens", "24")
    [record] = records(out)
    notice = resumed(out)
    assert notice["why"] == "the system prompt changed" and notice["window"] is None
    messages = saved_messages()
    assert messages[0] == Message("system", pirate)
    assert record["state_fallback"] == "the system prompt changed"
    engine = engine_at(Settings().n_ctx, pirate)
    assert_prefilled_what_was_said(engine, messages[:-2], "Name another one.", int(notice["tokens"].replace(",", "")),
                                   record)
    # The reply is the one the new system prompt gives (greedy), not the old one's.
    engine.load_conversation(messages[:-2])
    assert list(engine.send("Name another one."))[-1].record.reply == record["reply"]

    # Without --system the session keeps the prompt it has now, and its KV state.
    out = chatapp_exe("ask", "--session", "s", "And a third?", *GREEDY, "--max-tokens", "24")
    [third] = records(out)
    assert third["restored_tokens"] > 0 and "not used" not in out.stderr
    assert saved_messages()[0] == Message("system", pirate)


def test_the_same_system_prompt_again_changes_nothing(chatapp_exe):
    records(chatapp_exe("ask", "--session", "s", "--system", "Be brief.", "Name a colour.", *GREEDY,
                        "--max-tokens", "16"))
    out = chatapp_exe("ask", "--session", "s", "--system", "Be brief.", "Another?", *GREEDY, "--max-tokens", "16")
    [record] = records(out)
    assert record["restored_tokens"] > 0 and "not used" not in out.stderr and "system prompt" not in out.stderr
