"""Token probabilities one key away, as in SillyTavern's panel: F10 shades every reply on screen
that has probabilities; one written before it is scored on request (Alt+P: one prefill pass over
it, said in tokens); a click on a token, or the keys, show its alternatives next to it in the
transcript; 1-9 branch from there; what was scored comes back with the session."""

from __future__ import annotations

from textual.geometry import Offset

from chatapp.ui.messages import ReplyScored, SessionOpened, TurnFinished, TurnStarted
from chatapp.ui.widgets.token_popup import TokenPopup
from chatapp.ui.widgets.transcript import Reply, Transcript
from tests.ui._helpers import next_of, notified, send, wait_until

WIDE = (160, 48)


def replies(app) -> list[Reply]:
    return list(app.query_one(Transcript).query(Reply))


def token_offset(reply: Reply, step: int) -> Offset:
    """Where token `step` of a shaded reply is drawn, from the reply widget's top-left (for a click)."""
    at = reply.step_position(step)
    assert at is not None, f"token {step} is not drawn"
    return reply.content_region.offset - reply.region.offset + at


def next_to(popup: TokenPopup, reply: Reply, step: int) -> bool:
    """The popup is on screen, in the transcript, on the row under the token or ending on the row above it."""
    token_y = reply.content_region.y + reply.step_position(step).y
    transcript = popup.parent.region
    return (transcript.contains_region(popup.region) and
            (popup.region.y == token_y + 1 or popup.region.bottom == token_y))


async def test_f10_then_alt_p_scores_a_reply_written_before_it_and_shows_a_token_s_alternatives_next_to_it(make_app):
    app, seen = make_app()
    async with app.run_test(size=WIDE, message_hook=seen) as pilot:
        await send(pilot, "Name a fruit.", seen)
        reply = replies(app)[-1]
        assert not reply.probs  # written with the view off: nothing was computed
        await pilot.press("f10")
        said = await notified(pilot, seen, lambda n: n.message.startswith("confidence view on"))
        assert "0 of 1 replies on screen shaded" in said.message and "Alt+P scores" in said.message

        await pilot.press("alt+p")  # no reply selected: the last one
        scored = await next_of(pilot, seen, ReplyScored, 0, "score")
        assert scored.scored is not None and scored.message_id == reply.message_id
        cost = await notified(pilot, seen, lambda n: n.message.startswith(f"scored reply {reply.message_id}"))
        done = scored.scored
        assert f"prefilled {done.prefilled:,} tokens ({len(done.probs):,} of the reply" in cost.message
        assert len(done.probs) >= 3 and done.prefilled >= len(done.probs)
        assert reply.probs == done.probs and reply.shaded  # its tokens spell the reply as shown

        popup = app.query_one(TokenPopup)
        await wait_until(pilot, lambda: popup.has_focus and popup.region.height > 3)
        step = popup.step
        assert popup.message_id == reply.message_id and next_to(popup, reply, step)
        assert popup.border_title == f"token {step + 1} of {len(reply.probs)} · reply {reply.message_id}"
        assert f"(id {reply.probs[step].id})" in popup.plain  # the token's own alternatives
        await pilot.press("right")  # the next token's alternatives, moved beside it
        await wait_until(pilot, lambda: popup.step == step + 1)
        await pilot.pause()
        assert next_to(popup, reply, step + 1)
        await pilot.press("escape")
        await wait_until(pilot, lambda: not app.query(TokenPopup))
        assert app.focused is app.query_one("#composer")  # typing goes on in the composer


async def test_a_click_on_a_token_shows_its_alternatives_and_a_number_branches_the_reply_there(make_app):
    app, seen = make_app(max_tokens=12)
    async with app.run_test(size=WIDE, message_hook=seen) as pilot:
        await pilot.press("f10")
        await send(pilot, "Name a fruit.", seen)
        await send(pilot, "And a colour?", seen)
        first = replies(app)[0]  # an earlier reply, not the last turn's: the Tokens panel never showed it
        probs = first.probs
        assert first.shaded and len(probs) >= 4
        at = 2
        await pilot.click(first, offset=token_offset(first, at))
        popup = app.query_one(TokenPopup)
        # placed beside the token once laid out (a busy machine lays it out a frame later)
        await wait_until(pilot, lambda: popup.has_focus and popup.region.height > 3 and next_to(popup, first, at))
        assert popup.message_id == first.message_id and popup.step == at
        assert app.selection().message_id == first.message_id  # its actions are under it too

        question = app.engine.tree[first.message_id].parent
        started = seen.count(TurnStarted)
        await pilot.press("2")  # the second candidate in place of that token
        done = await next_of(pilot, seen, TurnFinished, 2, "turn")
        assert seen.of(TurnStarted)[started].regenerate
        tree = app.engine.tree
        assert [m.id for m in tree.children(question)] == [first.message_id, done.record.extra["message_id"]]
        chosen = probs[at].top[1].id
        assert app.engine.last_reply_ids()[:at + 1] == [*(p.id for p in probs[:at]), chosen]
        assert done.record.extra["branch"] == "2/2" and not app.query(TokenPopup)


async def test_scored_probabilities_come_back_when_the_session_is_opened_again(make_app):
    app, seen = make_app()
    async with app.run_test(size=WIDE, message_hook=seen) as pilot:
        await send(pilot, "Name a fruit.", seen)
        await next_of(pilot, seen, SessionOpened, 0)
        name = app.sessions_ui.name
        await pilot.press("alt+p")
        scored = (await next_of(pilot, seen, ReplyScored, 0, "score")).scored
        await wait_until(pilot, lambda: not any(w.group == "score" and w.is_running for w in app.workers))
    app.release_engine()

    again, seen = make_app(session=name)
    async with again.run_test(size=WIDE, message_hook=seen) as pilot:
        await next_of(pilot, seen, SessionOpened, 0, "session")
        reply = replies(again)[-1]
        assert [(p.id, round(p.logprob, 4)) for p in reply.probs] == [(p.id, round(p.logprob, 4)) for p in scored.probs]
        await pilot.press("f10")
        await pilot.pause()
        assert reply.shaded  # shaded at once: nothing to score again
