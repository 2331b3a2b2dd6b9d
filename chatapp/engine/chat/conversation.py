"""The conversation `Engine` owns: its messages, the context window over them, and the
full-context policy. Plain data and rules; tokenizing is the caller's (a backend's)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from chatapp.engine.events import ContextTrimmed, Message
from chatapp.errors import ContextFullError, InputError


class Conversation:
    def __init__(self, system_prompt: str = "") -> None:
        self.messages: list[Message] = []
        self.window_start = 0
        """Index of the first non-system message still inside the context window."""
        self.set_system_prompt(system_prompt)

    @property
    def n_system(self) -> int:
        return 1 if self.messages and self.messages[0].role == "system" else 0

    @property
    def system_prompt(self) -> str:
        return self.messages[0].content if self.n_system else ""

    def set_system_prompt(self, text: str) -> None:
        if self.n_system:
            self.messages.pop(0)
            self.window_start -= 1
        if text:
            self.messages.insert(0, Message("system", text))
            self.window_start += 1
        self.window_start = max(self.window_start, self.n_system)

    def reset(self) -> None:
        """A new conversation with the same system prompt."""
        del self.messages[self.n_system:]
        self.window_start = self.n_system

    def load(self, messages: Sequence[Message], window_start: int | None = None) -> None:
        self.messages = list(messages)
        start = self.n_system if window_start is None else window_start
        self.window_start = min(max(start, self.n_system), len(self.messages))

    def context_messages(self) -> list[Message]:
        """The system prompt and the messages inside the window: what the model sees."""
        return self.messages[: self.n_system] + self.messages[self.window_start:]

    def add(self, message: Message) -> None:
        self.messages.append(message)

    def drop_last_reply(self) -> list[Message]:
        """For regenerate: remove the replies after the last user message; returns them."""
        dropped = []
        while self.messages and self.messages[-1].role == "assistant":
            dropped.insert(0, self.messages.pop())
        if not self.messages or self.messages[-1].role != "user":
            self.messages.extend(dropped)
            raise InputError("there is no user message to answer again")
        return dropped

    def refit(self, prompt_ids: Callable[[list[Message]], list[int]], n_ctx: int, reserve: int) -> int:
        """Place the window again from scratch: it starts at the oldest whole turn from which
        the prompt (every later message, and the system prompt) fits with `reserve` tokens
        left for the reply, whether that turn was inside the window before or not. A
        conversation loaded from a session saved under another n_ctx needs this: `fit` only
        ever drops turns. When not even the system prompt fits, the window holds no turn (the
        next turn's `fit` says why it can't run). Returns how many turns came back into the
        window (negative: how many left it).

        A prompt grows with every message put before it, so the first start that fits is
        found by bisection: a few tokenizations of the transcript, not one per turn."""
        n_system = self.n_system
        starts = [i for i in range(n_system, len(self.messages))
                  if i == n_system or self.messages[i].role == "user"] + [len(self.messages)]

        def fits(start: int) -> bool:
            return len(prompt_ids(self.messages[:n_system] + self.messages[start:])) + reserve <= n_ctx

        low, high = 0, len(starts) - 1  # starts[high] is taken when nothing earlier fits
        while low < high:
            middle = (low + high) // 2
            if fits(starts[middle]):
                high = middle
            else:
                low = middle + 1
        before, self.window_start = self.window_start, starts[low]
        between = self.messages[min(before, self.window_start):max(before, self.window_start)]
        turns = sum(1 for m in between if m.role == "user")
        return turns if self.window_start < before else -turns

    def fit(self, prompt_ids: Callable[[list[Message]], list[int]], n_ctx: int,
            reserve: int) -> tuple[list[int], ContextTrimmed | None]:
        """The prompt's ids once the oldest whole turns (never the system prompt) are dropped
        until it fits with `reserve` tokens left for the reply. Raises ContextFullError, with
        the window as it was, when even the last message alone cannot fit."""
        start_before = self.window_start
        ids = prompt_ids(self.context_messages())
        before, dropped = len(ids), []
        while len(ids) + reserve > n_ctx:
            next_user = next((i for i in range(self.window_start + 1, len(self.messages))
                              if self.messages[i].role == "user"), None)
            if next_user is None:
                self.window_start = start_before
                raise ContextFullError(
                    f"this turn needs {len(ids)} prompt tokens plus {reserve} for the reply, "
                    f"but the context holds {n_ctx} even after dropping every earlier turn; "
                    f"shorten the message or raise --ctx")
            dropped.extend(self.messages[self.window_start:next_user])
            self.window_start = next_user
            ids = prompt_ids(self.context_messages())
        if not dropped:
            return ids, None
        turns = sum(1 for m in dropped if m.role == "user")
        return ids, ContextTrimmed(tuple(dropped), turns, before, len(ids))
