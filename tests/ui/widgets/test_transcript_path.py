"""The transcript draws one path of the tree (Transcript.show_path), on a tiny host App: the
widgets of the messages two paths share stay, the rest are mounted; nothing else of the tree is."""

from __future__ import annotations

from textual.app import App, ComposeResult

from chatapp.engine.events import Message
from chatapp.ui.shown import Shown
from chatapp.ui.widgets.transcript import Notice, Reply, Transcript, UserMessage


class Host(App[None]):
    def compose(self) -> ComposeResult:
        yield Transcript(id="transcript")


def message(role: str, text: str, message_id: str, stopped: bool = False) -> Message:
    return Message(role, text, stopped=stopped, id=message_id)


Q1, R1 = message("user", "first?", "aaaa0001"), message("assistant", "one", "aaaa0002")
Q2, R2 = message("user", "second?", "aaaa0003"), message("assistant", "two", "aaaa0004", stopped=True)
Q2B, R2B = message("user", "second, again?", "aaaa0005"), message("assistant", "two again", "aaaa0006")


async def test_a_switch_keeps_the_shared_messages_and_mounts_the_rest():
    app = Host()
    async with app.run_test() as pilot:
        transcript = app.query_one(Transcript)
        await transcript.show_path([Shown(Q1), Shown(R1), Shown(Q2, 1, 2), Shown(R2)])
        first = transcript.messages()
        assert [w.border_title for w in first] == ["you · aaaa0001", "assistant · aaaa0002",
                                                   "you · aaaa0003 · ‹ 1/2 ›", "assistant · aaaa0004"]
        assert isinstance(transcript.children[-1], Notice)  # the stopped reply's note
        transcript.select(first[3])
        await transcript.show_path([Shown(Q1), Shown(R1), Shown(Q2B, 2, 2), Shown(R2B)], dropped=2)
        await pilot.pause()
        now = transcript.messages()
        assert now[:2] == first[:2]  # the same widgets, not drawn again
        assert not set(now[2:]) & set(first)
        assert [w.message_id for w in now] == ["aaaa0001", "aaaa0002", "aaaa0005", "aaaa0006"]
        assert now[2].border_title == "you · aaaa0005 · ‹ 2/2 ›"
        assert [w.has_class("-dropped") for w in now] == [True, True, False, False]
        assert not transcript.query(Notice)  # the note went with its reply
        assert transcript.selected is None  # the selected message is no longer drawn
        assert [type(w) for w in transcript.children] == [UserMessage, Reply, UserMessage, Reply]


async def test_keys_select_within_the_path_and_a_shorter_path_drops_the_rest():
    app = Host()
    async with app.run_test() as pilot:
        transcript = app.query_one(Transcript)
        await transcript.show_path([Shown(Q1), Shown(R1), Shown(Q2), Shown(R2)])
        assert transcript.select_step(-1) is transcript.messages()[3]  # nothing selected: the last
        assert transcript.select_step(+1) is transcript.messages()[3]
        for _ in range(5):
            transcript.select_step(-1)
        assert transcript.selected_index() == 0
        await transcript.show_path([Shown(Q1), Shown(R1, 1, 3)])
        await pilot.pause()
        assert [w.message_id for w in transcript.messages()] == ["aaaa0001", "aaaa0002"]
        assert transcript.messages()[1].border_title == "assistant · aaaa0002 · ‹ 1/3 ›"
        assert transcript.selected_index() == 0
