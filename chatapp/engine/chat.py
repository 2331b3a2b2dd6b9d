"""A conversation on one model: template, prefix reuse, the full-context policy, streaming.

`Chat.send()` is a generator of events. It runs on whatever thread iterates it (a worker in
the TUI), and `Chat.stop()` may be called from any other thread.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

from chatapp.engine.events import ContextTrimmed, Event, Message, PrefillDone, TextDelta, TurnDone
from chatapp.engine.stats import LiveDecode, TurnRecord
from chatapp.engine.tokens import Utf8Stream
from chatapp.errors import ContextFullError, InputError


@dataclass(frozen=True)
class GenerationSettings:
    temperature: float = 0.7
    top_k: int = 40
    top_p: float = 0.95
    min_p: float = 0.05
    max_tokens: int = 512
    seed: int = -1


def common_prefix(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


class Chat:
    def __init__(self, runtime, system_prompt: str = "", generation: GenerationSettings = GenerationSettings()):
        self.runtime = runtime
        self.generation = generation
        self.messages: list[Message] = []
        self.window_start = 0
        """Index of the first non-system message still inside the context window."""
        self._stop = threading.Event()
        self.set_system_prompt(system_prompt)

    # --- conversation ----------------------------------------------------------------
    @property
    def system_prompt(self) -> str:
        return self.messages[0].content if self.messages and self.messages[0].role == "system" else ""

    def set_system_prompt(self, text: str) -> None:
        has_system = bool(self.messages) and self.messages[0].role == "system"
        if has_system:
            self.messages.pop(0)
            self.window_start -= 1
        if text:
            self.messages.insert(0, Message("system", text))
            self.window_start += 1
        self.window_start = max(self.window_start, self._n_system)

    @property
    def _n_system(self) -> int:
        return 1 if self.messages and self.messages[0].role == "system" else 0

    def reset(self) -> None:
        """A new conversation with the same system prompt. The KV prefix stays reusable."""
        del self.messages[self._n_system:]
        self.window_start = self._n_system

    def load_messages(self, messages: list[Message], window_start: int | None = None) -> None:
        self.messages = list(messages)
        self.window_start = self._n_system if window_start is None else window_start

    def context_messages(self) -> list[Message]:
        return self.messages[: self._n_system] + self.messages[self.window_start:]

    def render(self, messages: list[Message] | None = None, *, add_generation_prompt: bool = True) -> str:
        messages = self.context_messages() if messages is None else messages
        return self.runtime.render_chat([m.as_template_input() for m in messages],
                                        add_generation_prompt=add_generation_prompt)

    def prompt_ids(self, messages: list[Message] | None = None) -> list[int]:
        text = self.render(messages)
        bos_text = self.runtime.token_bytes(self.runtime.bos_id).decode("utf-8", "replace")
        add_bos = self.runtime.adds_bos and not (bos_text and text.startswith(bos_text))
        return self.runtime.tokenize(text, special=True, add_bos=add_bos)

    # --- turns -----------------------------------------------------------------------
    def stop(self) -> None:
        self._stop.set()

    def send(self, text: str) -> Iterator[Event]:
        if not text.strip():
            raise InputError("the prompt is empty")
        self.messages.append(Message("user", text))
        return self._turn()

    def regenerate(self) -> Iterator[Event]:
        """Drop the last reply and answer the last user message again."""
        while self.messages and self.messages[-1].role == "assistant":
            self.messages.pop()
        if not self.messages or self.messages[-1].role != "user":
            raise InputError("there is no user message to answer again")
        return self._turn()

    def _reserve(self) -> int:
        """Room kept free for the reply when deciding whether a turn fits."""
        return max(1, min(self.generation.max_tokens, self.runtime.n_ctx // 4))

    def _fit(self) -> tuple[list[int], ContextTrimmed | None]:
        """Drop the oldest whole turns (never the system prompt) until the prompt fits."""
        n_ctx, reserve = self.runtime.n_ctx, self._reserve()
        ids = self.prompt_ids()
        before, dropped = len(ids), []
        while len(ids) + reserve > n_ctx:
            next_user = next((i for i in range(self.window_start + 1, len(self.messages))
                              if self.messages[i].role == "user"), None)
            if next_user is None:
                self.messages.pop()  # the new message is refused; the caller still has its text
                self.window_start = min(self.window_start, len(self.messages))
                raise ContextFullError(
                    f"this turn needs {len(ids)} prompt tokens plus {reserve} for the reply, "
                    f"but the context holds {n_ctx} even after dropping every earlier turn; "
                    f"shorten the message or raise --ctx")
            dropped.extend(self.messages[self.window_start:next_user])
            self.window_start = next_user
            ids = self.prompt_ids()
        if not dropped:
            return ids, None
        turns = sum(1 for m in dropped if m.role == "user")
        return ids, ContextTrimmed(tuple(dropped), turns, before, len(ids))

    def _turn(self) -> Iterator[Event]:
        started = time.perf_counter()
        self._stop.clear()
        rt, gen = self.runtime, self.generation
        prompt, trimmed = self._fit()
        if trimmed:
            yield trimmed
        cached_before = rt.kv_tokens
        cached = common_prefix(cached_before, prompt)
        if cached == len(prompt):
            cached -= 1  # the last prompt token must run again to produce logits
        reuse_broken_at = cached if cached < len(cached_before) and cached < len(prompt) - 1 else None
        rt.keep_kv_prefix(cached)
        rt.reset_perf()
        rt.eval(prompt[cached:])
        after_prefill = rt.perf()
        prefill_ms = after_prefill.prompt_ms + after_prefill.eval_ms
        yield PrefillDone(len(prompt), cached, len(prompt) - cached, prefill_ms, reuse_broken_at)

        sampler = rt.sampler(temperature=gen.temperature, top_k=gen.top_k, top_p=gen.top_p,
                             min_p=gen.min_p, seed=gen.seed)
        stream, parts, generated = Utf8Stream(), [], 0
        ttft_ms, finish = None, "length"
        try:
            while generated < gen.max_tokens:
                if self._stop.is_set():
                    finish = "stopped"
                    break
                token = sampler.sample()
                if rt.is_end_of_generation(token):
                    finish = "stop"
                    break
                generated += 1
                text = "" if rt.is_special(token) else stream.feed(rt.token_bytes(token))
                if rt.n_cached >= rt.n_ctx:
                    parts.append(text)
                    finish = "context"
                    break
                rt.eval([token])
                if text:
                    if ttft_ms is None:
                        ttft_ms = (time.perf_counter() - started) * 1000
                    parts.append(text)
                    # Per token, the runtime's own count of cached tokens (kept equal to llama.cpp's)
                    # spares a llama.cpp call; the record below asks llama.cpp itself.
                    yield TextDelta(text, self._live(after_prefill, rt.n_cached))
        except KeyboardInterrupt:
            finish = "stopped"
        finally:
            sampler.close()
        parts.append(stream.flush())
        reply = "".join(parts)
        if ttft_ms is None:
            ttft_ms = (time.perf_counter() - started) * 1000
        self.messages.append(Message("assistant", reply, stopped=finish == "stopped"))
        live = self._live(after_prefill)
        yield TurnDone(TurnRecord(
            reply=reply, prompt_tokens=len(prompt), cached_tokens=cached, prefill_tokens=len(prompt) - cached,
            prefill_ms=prefill_ms, ttft_ms=ttft_ms, decode_tokens=live.decode_tokens, decode_ms=live.decode_ms,
            generated_tokens=generated, kv_used=live.kv_used, n_ctx=rt.n_ctx,
            kv_bytes_per_token=rt.kv_bytes_per_token, dropped_turns=trimmed.dropped_turns if trimmed else 0,
            finish_reason=finish, reuse_broken_at=reuse_broken_at,
        ))

    def _live(self, after_prefill, kv_used: int | None = None) -> LiveDecode:
        now = self.runtime.perf()
        return LiveDecode(
            decode_tokens=now.eval_tokens - after_prefill.eval_tokens,
            decode_ms=now.eval_ms - after_prefill.eval_ms,
            kv_used=self.runtime.kv_cells_used() if kv_used is None else kv_used,
        )
