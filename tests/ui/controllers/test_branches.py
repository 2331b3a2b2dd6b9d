"""The branch controller (chatapp.ui.controllers.branches) on a small host App, on the real
default model: a sibling switch run on a worker and shown, and a regenerate asked of the host
(the app's side, with the transcript, the tree and the panels: tests/ui/test_branches.py,
tests/ui/test_one_truth.py)."""

from __future__ import annotations

from chatapp.ui.controllers.branches import BranchController
from chatapp.ui.controllers.turns import TurnHow
from chatapp.ui.messages import BranchChanged
from chatapp.ui.widgets.transcript import Reply
from tests.ui._helpers import Messages, notified, wait_until
from tests.ui.controllers.small_host import NoSessions

QUESTION = "Name a colour."


def ids(engine) -> list[str]:
    return [m.id for m in engine.messages if m.id]


async def test_a_switch_to_the_other_reply_runs_on_a_worker_and_the_host_shows_it(make_host):
    host, seen = make_host(lambda app: BranchController(app, NoSessions())), Messages()
    engine = host.engine
    list(engine.send(QUESTION))
    question, first = ids(engine)
    list(engine.regenerate(None))
    second = ids(engine)[1]
    assert second != first and [m.id for m in engine.tree.children(question)] == [first, second]
    async with host.run_test(size=(100, 30), message_hook=seen) as pilot:
        host.controller.previous_sibling()  # nothing selected: the last message that has another branch
        await wait_until(pilot, lambda: seen.count(BranchChanged) == 1, 60)
        await wait_until(pilot, lambda: host.branch.figures is not None, 10)
        changed = seen.of(BranchChanged)[0]
        assert ids(engine) == [question, first] and changed.switch is not None and changed.select == 1
        assert host.branch.figures == changed.figures == engine.branch_figures()
        assert host.branch.figures.leaf == first
        await wait_until(pilot, lambda: [r.message_id for r in host.transcript.query(Reply)] == [first], 10)
        assert host.busy_with == ["switch branches"]
        note = await notified(pilot, seen, lambda n: n.title == "Branch")
        assert note.message == changed.line and "1/2" in note.message


async def test_regenerate_asks_the_host_for_a_turn_beside_the_last_reply(make_host):
    host, seen = make_host(lambda app: BranchController(app, NoSessions())), Messages()
    async with host.run_test(message_hook=seen) as pilot:
        host.controller.regenerate()  # nothing asked yet
        await notified(pilot, seen, lambda n: n.message == "nothing to regenerate yet")
        assert host.started == []
        list(host.engine.send(QUESTION))
        host.controller.regenerate()
        assert host.started == [(QUESTION, TurnHow("regenerate", None))]
