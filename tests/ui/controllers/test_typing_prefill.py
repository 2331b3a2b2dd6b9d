"""The composer's controller (chatapp.ui.controllers.typing_prefill) on a small host App, on the
real default model: the composer's text tokenized on a worker, and prefilled ahead on a thread of
its own, so that the cache holds a prefix of the next prompt (the app's side, with the Speed
panel and everything that stops a run: tests/ui/test_typing_prefill.py)."""

from __future__ import annotations

import pytest

from chatapp.engine.chat.typeahead import next_question
from chatapp.ui.controllers.typing_prefill import TypingPrefill, TypingPrefilled
from chatapp.ui.messages import ComposerTokenized
from tests.engine.chat.typeahead_texts import QUESTION
from tests.ui._helpers import Messages, wait_until

pytestmark = pytest.mark.usefixtures("quiet_machine")


async def test_the_composers_text_is_tokenized_and_prefilled_ahead(make_host):
    host, seen = make_host(TypingPrefill), Messages()
    engine = host.engine
    async with host.run_test(message_hook=seen) as pilot:
        host.composer.load_text(QUESTION)
        host.controller.tokenize_composer()  # as a pause in typing does
        await wait_until(pilot, lambda: host.composer_tokens, 30)
        assert seen.count(ComposerTokenized) == 1
        assert [t.id for t in host.composer_tokens] == [t.id for t in engine.tokenize(QUESTION)]
        await wait_until(pilot, lambda: seen.count(TypingPrefilled) and not host.controller.running, 120)
        await pilot.pause()
        assert host.typed_ahead is seen.of(TypingPrefilled)[-1].state
        cached = engine.cached_tokens()
        prompt = engine.prompt_ids(next_question(engine.context_messages(), QUESTION))
        assert len(cached) > len(host.composer_tokens) // 2 and prompt[:len(cached)] == cached

        host.composer.load_text("")  # emptied: its tokens and what was typed ahead go
        host.controller.tokenize_composer()
        assert host.composer_tokens == () and host.typed_ahead is None
        await wait_until(pilot, lambda: not host.controller.running, 60)


async def test_a_command_or_a_running_turn_is_never_prefilled(make_host):
    host = make_host(TypingPrefill)
    async with host.run_test() as pilot:
        host.controller.start("/attach notes.md")
        assert not host.controller.running
        host.generating = True
        host.controller.start(QUESTION)
        assert not host.controller.running
        await pilot.pause()
        assert host.engine.cached_tokens() == []
