"""The turn worker's message stream and the transcript's notices, without a model; and a turn's
worker run on a small host App, on the real default model."""

from __future__ import annotations

from functools import partial
from itertools import count as counter

from chatapp.engine.chat.branch_states import BranchFigures
from chatapp.engine.events import ContextTrimmed, Message, PrefillDone, TextDelta, TurnDone
from chatapp.engine.stats import LiveDecode, TurnRecord
from chatapp.ui.controllers.branches import BranchController
from chatapp.ui.controllers.turns import TurnHow, run_turn, stream_turn
from chatapp.ui.messages import (
    BranchChanged, PrefillFinished, ReplyProgress, TurnFailed, TurnFinished, TurnStarted, TurnTrimmed)
from chatapp.ui.widgets.transcript import trim_notice
from tests.ui._helpers import TURN_TIMEOUT, Messages, wait_until
from tests.ui.controllers.small_host import NoSessions


class FakeEngine:
    def __init__(self):
        self.stops = 0

    def stop(self):
        self.stops += 1

    def branch_figures(self) -> BranchFigures:
        return BranchFigures("leaf", 10, 10, 10, 256)

    def cached_tokens(self) -> list[int]:  # a backend that cannot say its reply's tokens while it streams
        return []


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


# --- a turn's worker on a small host, on the real default model ---------------------------------
async def test_a_turn_on_a_small_hosts_worker_posts_its_messages_in_order(make_host):
    host, seen = make_host(lambda app: BranchController(app, NoSessions())), Messages()
    engine = host.engine
    async with host.run_test(message_hook=seen) as pilot:
        host.run_worker(partial(run_turn, host.gate, host.post_message, "Hi"), group="turn", thread=True)
        await wait_until(pilot, lambda: seen.count(TurnFinished) + seen.count(TurnFailed) == 1, TURN_TIMEOUT)
        kinds = [type(m) for m in seen if isinstance(m, (TurnStarted, PrefillFinished, ReplyProgress, TurnFinished))]
        assert kinds[0] is TurnStarted and kinds[1] is PrefillFinished and kinds[-1] is TurnFinished
        assert set(kinds[2:-1]) == {ReplyProgress}
        done = seen.of(TurnFinished)[0]
        assert done.record.reply == engine.messages[-1].content and done.figures == engine.branch_figures()
        assert seen.of(ReplyProgress)[-1].text.strip() == done.record.reply.strip()

        # A branching turn the engine refuses gives its text back and redraws the path as it was.
        path = [m.id for m in engine.messages if m.id]
        refused = TurnHow("token", path[-1], step=10_000, token=5)
        host.run_worker(partial(run_turn, host.gate, host.post_message, "Hi", refused), group="turn", thread=True)
        await wait_until(pilot, lambda: seen.count(TurnFailed) == 1 and seen.count(BranchChanged) == 1, TURN_TIMEOUT)
        failed = seen.of(TurnFailed)[0]
        assert failed.refused and failed.user_text == "Hi" and "has no token 10000 with probabilities" in failed.error
        assert [m.id for m in engine.messages if m.id] == path
        assert [shown.message.id for shown in seen.of(BranchChanged)[0].path] == path


def test_reply_tokens_describe_each_new_id_once_and_follow_a_cache_that_shrank():
    """The Tokens panel's live tokens (issue 59): read from the cache past the prompt, each id
    described once; drafted ids taken back, or changed, are read again from where they differ."""
    from chatapp.engine.tokens import Token
    from chatapp.ui.controllers.turns import ReplyTokens

    class Cache:
        def __init__(self):
            self.ids, self.described = [1, 2, 3], []

        def cached_tokens(self):
            return list(self.ids)

        def describe(self, ids):
            self.described += ids
            return [Token(i, f"<{i}>", False, b"") for i in ids]

    cache = Cache()
    reply = ReplyTokens(cache)
    assert reply.now() == ()  # before the prompt is prefilled: nothing to say
    reply.started(3)
    cache.ids += [10, 11]
    assert [t.id for t in reply.now()] == [10, 11]
    cache.ids += [12, 13, 14]  # two drafts accepted, one to be taken back
    assert [t.id for t in reply.now()] == [10, 11, 12, 13, 14]
    cache.ids[-1:] = [15]
    assert [t.id for t in reply.now()] == [10, 11, 12, 13, 15]
    del cache.ids[-2:]
    assert [t.piece for t in reply.now()] == ["<10>", "<11>", "<12>"]
    assert cache.described == [10, 11, 12, 13, 14, 15]  # each new id once, nothing read twice
