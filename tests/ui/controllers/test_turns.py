"""The turn worker's message stream and the transcript's notices, without a model."""

from __future__ import annotations

from itertools import count as counter

from chatapp.engine.chat.branch_states import BranchFigures
from chatapp.engine.events import ContextTrimmed, Message, PrefillDone, TextDelta, TurnDone
from chatapp.engine.stats import LiveDecode, TurnRecord
from chatapp.ui.messages import PrefillFinished, ReplyProgress, TurnFinished, TurnTrimmed
from chatapp.ui.controllers.turns import stream_turn
from chatapp.ui.widgets.transcript import trim_notice


class FakeEngine:
    def __init__(self):
        self.stops = 0

    def stop(self):
        self.stops += 1

    def branch_figures(self) -> BranchFigures:
        return BranchFigures("leaf", 10, 10, 10, 256)


def record(reply: str) -> TurnRecord:
    return TurnRecord(reply=reply, prompt_tokens=5, cached_tokens=0, prefill_tokens=5, prefill_ms=1.0,
                      ttft_ms=2.0, decode_tokens=len(reply), decode_ms=3.0, generated_tokens=len(reply),
                      kv_used=5 + len(reply), n_ctx=256, kv_bytes_per_token=10)


def events(n: int, trimmed: ContextTrimmed | None = None):
    if trimmed:
        yield trimmed
    yield PrefillDone(5, 0, 5, 1.0, None)
    for i in range(n):
        yield TextDelta("x", LiveDecode(i + 1, i * 10.0, 6 + i))
    yield TurnDone(record("x" * n))


def run(n: int, step: float, **kwargs) -> list:
    posted: list = []
    ticks = counter()
    stream_turn(FakeEngine(), events(n, **kwargs), posted.append, clock=lambda: next(ticks) * step)
    return posted


def test_progress_is_coalesced_to_ten_a_second_and_the_last_is_always_sent():
    posted = run(n=50, step=0.01)  # one token every 10 ms for half a second
    progress = [m for m in posted if isinstance(m, ReplyProgress)]
    assert 5 <= len(progress) <= 7
    assert progress[0].text == "x"
    assert progress[-1].text == "x" * 50
    assert progress[-1].live.decode_tokens == 50
    assert isinstance(posted[-1], TurnFinished) and posted[-1].record.reply == "x" * 50


def test_slow_decode_posts_every_token_without_a_duplicate_final():
    posted = run(n=5, step=1.0)
    assert [m.text for m in posted if isinstance(m, ReplyProgress)] == ["x", "xx", "xxx", "xxxx", "xxxxx"]


def test_messages_keep_the_turns_order():
    trimmed = ContextTrimmed((Message("user", "old"), Message("assistant", "old reply")), 1, 300, 200)
    kinds = [type(m) for m in run(n=2, step=1.0, trimmed=trimmed)]
    assert kinds == [TurnTrimmed, PrefillFinished, ReplyProgress, ReplyProgress, TurnFinished]


def test_a_cancelled_worker_stops_the_engine():
    engine = FakeEngine()
    stream_turn(engine, events(3), lambda m: None, cancelled=lambda: True)
    assert engine.stops >= 1


def test_trim_notice_names_the_dropped_turns():
    dropped = (Message("user", "first user text that is quite a bit longer than the cut"),
               Message("assistant", "a reply"), Message("user", "second"), Message("assistant", "another"))
    text = trim_notice(ContextTrimmed(dropped, 2, 300, 180))
    assert text.startswith("context full: dropped 2 oldest turns (4 messages: 'first user text that is quite a…', "
                           "'second')")
    assert text.endswith("prompt 300 → 180 tokens")
    one = trim_notice(ContextTrimmed(dropped[:2], 1, 300, 250))
    assert "dropped 1 oldest turn (2 messages: " in one
    many = trim_notice(ContextTrimmed(dropped * 2, 4, 300, 100))
    assert "'second', …)" in many
