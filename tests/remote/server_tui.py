"""The TUI against a llama-server: the terminal size, the turn timeout, and sending a turn."""

from __future__ import annotations

from chatapp.ui.app import ChatApp
from chatapp.ui.messages import TurnFailed, TurnFinished
from chatapp.ui.widgets.composer import Composer
from tests.ui._helpers import Messages, wait_until


WIDE = (120, 40)


TURN_TIMEOUT = 120.0


async def send(pilot, app: ChatApp, seen: Messages, text: str):
    done = seen.count(TurnFinished) + seen.count(TurnFailed)
    app.query_one(Composer).load_text(text)
    await pilot.press("enter")
    await wait_until(pilot, lambda: seen.count(TurnFinished) + seen.count(TurnFailed) > done, TURN_TIMEOUT)
    await wait_until(pilot, lambda: not app.generating)
    return [m for m in seen if isinstance(m, (TurnFinished, TurnFailed))][-1]
