"""The conversation `Engine` owns: its tree of messages, the context window over the active
path, and the full-context policy. Plain data and rules; tokenizing is the caller's (a backend's)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from chatapp.engine.chat.tree import MessageTree
from chatapp.engine.events import ContextTrimmed, Message
from chatapp.errors import ContextFullError, InputError


class Conversation:
    """The system prompt, a tree of messages (chatapp.engine.chat.tree), and the context window
    over the tree's active path. `messages` is what the model sees when every turn fits: the
    system prompt, then the active path; `window_start` indexes into it."""

    def __init__(self, system_prompt: str = "") -> None:
        self.tree = MessageTree()
        self._system = ""
        self.window_start = 0
        """Index (into `messages`) of the first non-system message still inside the context window."""
        self.set_system_prompt(system_prompt)

    @property
    def messages(self) -> list[Message]:
        """The system prompt (when there is one) and the active path: a copy."""
        return ([Message("system", self._system)] if self._system else []) + self.tree.path()

    @property
    def n_system(self) -> int:
        return 1 if self._system else 0

    @property
    def system_prompt(self) -> str:
        return self._system

    def set_system_prompt(self, text: str) -> None:
        self.window_start += (1 if text else 0) - self.n_system
        self._system = text
        self.window_start = max(self.window_start, self.n_system)

    def reset(self) -> None:
        """A new conversation with the same system prompt."""
        self.tree = MessageTree()
        self.window_start = self.n_system

    def load(self, messages: Sequence[Message], window_start: int | None = None, leaf: str | None = None) -> None:
        """A saved conversation: a system message first, if any, then the tree's messages in the
        order written (a linear transcript without ids is read as one path)."""
        messages = list(messages)
        self._system = messages[0].content if messages and messages[0].role == "system" else ""
        self.tree = MessageTree.from_messages(messages, leaf)
        self.place_window(window_start)

    def place_window(self, window_start: int | None = None) -> None:
        start = self.n_system if window_start is None else window_start
        self.window_start = min(max(start, self.n_system), self.n_system + len(self.tree.path()))

    def context_messages(self) -> list[Message]:
        """The system prompt and the messages inside the window: what the model sees."""
        messages = self.messages
        return messages[: self.n_system] + messages[self.window_start:]

    def add(self, message: Message) -> Message:
        """A new message after the active leaf; returns it with its id."""
        return self.tree.add(message, self.tree.leaf)

    def update_last(self, message: Message) -> Message:
        return self.tree.update(self.tree.leaf, message)

    def drop_last_reply(self) -> list[Message]:
        """For regenerate: end the active path at the last user message, so the new reply
        becomes a sibling of the replies after it (which stay in the tree); returns them."""
        path = self.tree.path()
        dropped = []
        while path and path[-1].role == "assistant":
            dropped.insert(0, path.pop())
        if not path:
            raise InputError("there is no user message to answer again")
        self.tree.switch(path[-1].id, descend=False)
        return dropped

    def refit(self, prompt_ids: Callable[[list[Message]], list[int]], n_ctx: int, reserve: int,
              floor: int = 0) -> int:
        """Place the window again from scratch: it starts at the oldest whole turn from which
        the prompt (every later message, and the system prompt) fits with `reserve` tokens
        left for the reply, whether that turn was inside the window before or not. A
        conversation loaded from a session saved under another n_ctx needs this: `fit` only
        ever drops turns. When not even the system prompt fits, the window holds no turn (the
        next turn's `fit` says why it can't run). Returns how many turns came back into the
        window (negative: how many left it).

        A prompt grows with every message put before it, so the first start that fits is
        found by bisection: a few tokenizations of the transcript, not one per turn. Starts
        before `floor` are not considered (a caller that knows they cannot fit saves their
        tokenizing: chatapp.engine.sessions.window)."""
        n_system, messages = self.n_system, self.messages
        starts = [i for i in range(max(n_system, floor), len(messages))
                  if i == n_system or messages[i].role == "user"] + [len(messages)]

        def fits(start: int) -> bool:
            return len(prompt_ids(messages[:n_system] + messages[start:])) + reserve <= n_ctx

        low, high = 0, len(starts) - 1  # starts[high] is taken when nothing earlier fits
        while low < high:
            middle = (low + high) // 2
            if fits(starts[middle]):
                high = middle
            else:
                low = middle + 1
        before, self.window_start = self.window_start, starts[low]
        between = messages[min(before, self.window_start):max(before, self.window_start)]
        turns = sum(1 for m in between if m.role == "user")
        return turns if self.window_start < before else -turns

    def fit(self, prompt_ids: Callable[[list[Message]], list[int]], n_ctx: int,
            reserve: int) -> tuple[list[int], ContextTrimmed | None]:
        """The prompt's ids once the oldest whole turns (never the system prompt) are dropped
        until it fits with `reserve` tokens left for the reply. Raises ContextFullError, with
        the window as it was, when even the last message alone cannot fit."""
        start_before, messages = self.window_start, self.messages
        ids = prompt_ids(self.context_messages())
        before, dropped = len(ids), []
        while len(ids) + reserve > n_ctx:
            next_user = next((i for i in range(self.window_start + 1, len(messages))
                              if messages[i].role == "user"), None)
            if next_user is None:
                self.window_start = start_before
                raise ContextFullError(
                    f"this turn needs {len(ids)} prompt tokens plus {reserve} for the reply, "
                    f"but the context holds {n_ctx} even after dropping every earlier turn; "
                    f"shorten the message or raise --ctx")
            dropped.extend(messages[self.window_start:next_user])
            self.window_start = next_user
            ids = prompt_ids(self.context_messages())
        if not dropped:
            return ids, None
        turns = sum(1 for m in dropped if m.role == "user")
        return ids, ContextTrimmed(tuple(dropped), turns, before, len(ids))
