"""One turn: the prompt fitted to the context window, streamed through the backend, the reply
split into thought and answer and added to the conversation, and the turn's record, with the
history cost it predicted before sending and measured after."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import replace

from chatapp.engine.backend import Backend, GenerationSettings
from chatapp.engine.chat import prompt_view, thoughts
from chatapp.engine.chat.attached import Attached
from chatapp.engine.chat.cache_track import CacheTrack
from chatapp.engine.chat.conversation import Conversation
from chatapp.engine.chat.decoded import DecodedReplies
from chatapp.engine.chat.rendering import Rendering
from chatapp.engine.chat.typeahead import TypeAheadState
from chatapp.engine.events import (
    ContextRetrieved, ContextTrimmed, Event, Generated, Message, PrefillDone, TextDelta, TurnDone)
from chatapp.engine.sampling import TokenProbs
from chatapp.engine.stats import TurnRecord
from chatapp.engine.thinking import ThoughtEnd
from chatapp.errors import ContextFullError, ServerError


class TurnRunner:
    def __init__(self, backend: Backend, conversation: Conversation, rendering: Rendering,
                 thinking: thoughts.Thinking, decoded: DecodedReplies, typeahead: TypeAheadState, track: CacheTrack,
                 attached: Attached, reply_probs: dict[str, tuple[TokenProbs, ...]],
                 generation: Callable[[], GenerationSettings], reserve: Callable[[], int]) -> None:
        self._backend = backend
        self._conversation = conversation
        self._rendering = rendering
        self._thinking = thinking
        self._decoded = decoded
        self._typeahead = typeahead
        self._track = track
        self._attached = attached
        self._reply_probs = reply_probs
        self._generation = generation
        self._reserve = reserve
        self.stop = threading.Event()

    def _fit(self, undo):
        try:
            return self._conversation.fit(self._rendering.prompt_ids, self._backend.summary.n_ctx, self._reserve())
        except (ContextFullError, ServerError):
            undo()
            raise

    def _fit_turn(self, undo, regenerating: bool) -> tuple[list[int], ContextTrimmed | None]:
        """`_fit`; and when the turns it dropped had placed attachment text, the new question's
        block is chosen again (what they held is gone from the context) and fitted once more."""
        prompt, trimmed = self._fit(undo)
        if regenerating or trimmed is None or not any(m.context for m in trimmed.dropped):
            return prompt, trimmed
        question = self._conversation.messages[-1]
        context = self._attached.retrieve(question.content, self._conversation.context_messages()[:-1])
        if context == question.context:
            return prompt, trimmed
        self._conversation.update_last(replace(question, context=context))
        prompt, more = self._fit(undo)
        if more is None:
            return prompt, replace(trimmed, prompt_tokens_after=len(prompt))
        return prompt, ContextTrimmed(trimmed.dropped + more.dropped, trimmed.dropped_turns + more.dropped_turns,
                                      trimmed.prompt_tokens_before, more.prompt_tokens_after)

    def run(self, undo, action: str, reuse_limit: int | None = None,
              since: float | None = None, forced: tuple[int, ...] = (),
              more: tuple[int, ThoughtEnd | None] | None = None) -> Iterator[Event]:
        started = time.perf_counter() if since is None else since
        self.stop.clear()
        regenerating = action == "regenerate"
        prompt, trimmed = self._fit_turn(undo, regenerating)
        if trimmed:
            yield trimmed
        prompt_messages = self._conversation.context_messages()
        question = prompt_messages[-1]
        if question.context is not None and not regenerating:
            yield ContextRetrieved(question.context)
        if self._backend.summary.kind == "in-process":  # a server batches as it will: nothing to keep to
            typed = self._typeahead.reuse_limit(self._backend.cached_tokens(), prompt)
            if typed is not None:
                reuse_limit = typed if reuse_limit is None else min(reuse_limit, typed)
        generation, ttft_ms, finished = self._generation(), None, None
        steer = self._thinking.steering(more)
        split = thoughts.TurnSplit(steer.fmt if steer is not None else None)
        cached_before = self._backend.cached_tokens()
        history_ids, glue = self._rendering.history_ids(prompt_messages[:-1])
        whole = question.parent is not None and question.parent == self._track.leaf  # the cache: its path's
        expected = self._thinking.reprefill_expected(
            cached_before, history_ids, glue, whole, self._rendering.next_turn_ids(prompt_messages[:-1])) \
            if cached_before else 0
        try:
            stream = self._backend.stream(prompt, generation, self.stop, reuse_limit=reuse_limit, forced=forced,
                                          **({"steer": steer} if steer is not None else {}))
            for event in stream:
                if isinstance(event, Generated):
                    finished = event
                    continue
                if isinstance(event, TextDelta):
                    if ttft_ms is None:
                        ttft_ms = (time.perf_counter() - started) * 1000
                    yield from split.feed(event)
                    continue
                yield event
        except ContextFullError:  # the backend's own count said no (a server with a smaller context)
            undo()
            raise
        except BaseException:  # stopped or failed mid-turn: the cache holds no finished path
            self._track.leaf = self._track.kept_as_is = None
            raise
        assert finished is not None, "a backend's stream ends with Generated"
        if ttft_ms is None:
            ttft_ms = (time.perf_counter() - started) * 1000
        prefill = finished.prefill or PrefillDone(len(prompt), 0, 0, 0.0, None)
        self._track.last_reuse = prefill.cached_tokens
        typed = self._typeahead.prefilled(prefill.cached_tokens)
        self._typeahead.forget()
        if prefill.prefill_tokens >= 64 and prefill.prefill_ms > 0:
            self._track.prefill_tps = prefill.prefill_tps
        yield from split.finish()
        answer, thinking = split.parts(finished.reply)
        reply = self._conversation.add(Message("assistant", answer, stopped=finished.finish_reason == "stopped",
                                               thinking=thinking))
        decoded = self._thinking.remember(reply.id, finished.reply, thinking, answer)
        cache_ids, as_decoded = self._backend.cached_tokens(), []
        if not thinking and not forced and cache_ids[:len(prompt)] == list(prompt):
            as_decoded = self._decoded.remember(reply.id, answer, cache_ids[len(prompt):])
        self._thinking.ended(reply.id, len(cache_ids))
        self._track.leaf, self._track.kept_as_is = reply.id, None
        record = TurnRecord(
            reply=answer, prompt_tokens=len(prompt) + len(forced), cached_tokens=prefill.cached_tokens,
            prefill_tokens=prefill.prefill_tokens, prefill_ms=prefill.prefill_ms, ttft_ms=ttft_ms,
            decode_tokens=finished.decode_tokens, decode_ms=finished.decode_ms,
            generated_tokens=finished.generated_tokens, kv_used=finished.kv_used, n_ctx=self._backend.summary.n_ctx,
            kv_bytes_per_token=self._backend.summary.kv_bytes_per_token or 0,
            dropped_turns=trimmed.dropped_turns if trimmed else 0, finish_reason=finished.finish_reason,
            reuse_broken_at=prefill.reuse_broken_at, prefilled_while_typing=typed, extra=dict(finished.extra),
            probs=finished.probs, thinking=thinking, thinking_tokens=split.thinking_tokens,
            thinking_ms=split.thinking_ms, reprefill_expected=expected,
        )
        record.extra.update(message_id=reply.id, parent_id=reply.parent, action=action)
        if decoded:  # a resumed session renders the reply back as it was decoded ("keep")
            record.extra["reply_as_decoded"] = decoded
        if as_decoded:  # and puts its tokens back as the saved cache holds them (chat.decoded)
            record.extra["reply_ids_as_decoded"] = as_decoded
        if thinking or expected:  # measured as predicted: prefilled at places the cache held before
            held = self._thinking.reprefill_held(cached_before, history_ids, glue, whole) if cached_before else 0
            record.extra["reprefill_tokens"] = max(0, prefill.prefill_tokens - (len(prompt) + len(forced) - held))
        if finished.probs:
            self._reply_probs[reply.id] = finished.probs
        if action != "send":
            family, index = self._conversation.tree.siblings(reply.id if regenerating else reply.parent)
            record.extra["branch"] = f"{index + 1}/{len(family)}"
        if forced:
            record.extra.update(forced_tokens=finished.forced, forced_prefilled=finished.forced_prefilled)
        if steer is not None:  # a thinking model: the mode the turn ran in ("on", "off" or a budget)
            record.extra["think"] = self._thinking.mode
        if more is not None:  # think more: how much more, and whether the cache was cut, not prefilled
            record.extra.update(think_more=more[0], think_more_from=(
                "cache" if more[1] is not None else "kept" if finished.forced_prefilled < len(forced) else "text"))
        if generation.shape is not None and generation.grammar is None and (
                checked := generation.shape.check(answer)) is not None:  # a tool call's grammar took its place
            record.extra.update(checked.record())
        if question.context is not None or self._attached.plans:
            record.extra["retrieved"] = question.context.to_json() if question.context else []
        drafted = finished.drafted
        self._track.last_turn = (cache_ids, len(prompt))
        yield TurnDone(record, lambda: thoughts.label_thoughts(
            self._view(cache_ids, prompt_messages, record, drafted, len(forced)), self._thinking.format))

    def _view(self, cache_ids: list[int], prompt_messages: list[Message], record: TurnRecord,
              drafted: tuple[int, ...] = (), forced: int = 0):
        try:
            bare = self._rendering.without_tools()
            return prompt_view.build(self._backend.describe(cache_ids), self._rendering.render, prompt_messages,
                                     record.prompt_tokens, record.cached_tokens, drafted, forced, bare)
        except ServerError:  # the server went away after the turn: the turn stands, without its view
            return []
