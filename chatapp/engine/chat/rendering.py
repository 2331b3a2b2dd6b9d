"""The conversation through the model's template: the prompt as text and as token ids, the
tools it offers, and the history as the next turn's prompt starts with it. Where a model
family's way of rendering lands (chatapp.engine.thinking, chatapp.engine.chat.tool_prompt)."""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial

from chatapp.engine.backend import Backend
from chatapp.engine.chat import prompt_tokens, thoughts
from chatapp.engine.chat.conversation import Conversation
from chatapp.engine.chat.decoded import DecodedReplies
from chatapp.engine.chat.tool_prompt import ToolCosts, ToolPrompt, tool_costs
from chatapp.engine.chat.userless import PROBES, render_userless
from chatapp.engine.events import Message
from chatapp.engine.sampling import TokenProbs
from chatapp.engine.tokens import common_prefix
from chatapp.engine.tools.spec import ToolSpec
from chatapp.errors import InputError


class Rendering:
    def __init__(self, backend: Backend, conversation: Conversation, thinking: thoughts.Thinking,
                 decoded: DecodedReplies) -> None:
        self._backend = backend
        self._conversation = conversation
        self._thinking = thinking
        self._decoded = decoded
        self._tool_prompt = ToolPrompt(backend.render)
        self.tools: tuple[ToolSpec, ...] = ()
        """The tools offered to the model (Engine.set_tools): their schemas are in every prompt."""

    def render(self, messages: Sequence[Message] | None = None, *, add_generation_prompt: bool = True) -> str:
        """The messages through the template; a thinking model's earlier thoughts as the
        `thinking_history` setting says (chatapp.engine.thinking.render_history)."""
        messages = self._conversation.context_messages() if messages is None else messages
        return render_userless(self._render, messages, add_generation_prompt)  # a system-only list, an empty reply

    def _render(self, messages: Sequence[Message], add_generation_prompt: bool) -> str:
        if self.tools:  # a thinking model's history choice does not apply with tools yet
            return self._tool_prompt.render(messages, add_generation_prompt=add_generation_prompt, tools=self.tools,
                                            switches=self._thinking.switches())
        return self._thinking.render(messages, add_generation_prompt)

    def without_tools(self):
        """`render` as it would be with no tools offered (None when none are): the prompt view
        tells the tools' part of a prompt from the rest by it."""
        return partial(self._tool_prompt.render, tools=()) if self.tools else None

    def prompt_ids(self, messages: Sequence[Message] | None = None, *, add_generation_prompt: bool = True) -> list[int]:
        """The templated prompt's token ids for these messages (the window's, by default):
        the template's markers as control tokens, message text always as plain text. Without
        the generation prompt, these are the ids the next turn's prompt starts with."""
        messages = self._conversation.context_messages() if messages is None else messages
        ids = prompt_tokens.prompt_ids(self._backend, self.render, messages,
                                       add_generation_prompt=add_generation_prompt)
        return self._decoded.splice(ids, messages)  # replies cut into tokens as the cache holds them

    def history_ids(self, messages: Sequence[Message]) -> tuple[list[int], int]:
        """The prompt of `messages` without the generation prompt, and how many of its last
        tokens are the template's end of turn (a control token, and only whitespace after it)."""
        if not messages:
            return [], 0
        ids = self.prompt_ids(messages, add_generation_prompt=False)
        tail = self._backend.describe(ids[-4:])
        ends = [i for i, t in enumerate(tail) if t.special]
        if ends and not "".join(t.piece for t in tail[ends[-1] + 1:]).strip():
            return ids, len(tail) - ends[-1]
        return ids, 0

    def next_turn_ids(self, messages: Sequence[Message]) -> list[int]:
        """The ids the next turn's prompt starts with, whatever its question: what the prompts of
        `messages` plus each of two different probe questions share. Rendered without a question,
        the history is not always what the next turn sends: Qwen3's family keeps the thought of a
        reply that comes after the last question and drops it once another question follows, so
        the prediction of what the cache keeps is made from the history as a question renders it."""
        if not messages:
            return []
        first, second = (self.prompt_ids([*messages, Message("user", probe)]) for probe in PROBES)
        return first[:common_prefix(first, second)]

    def reprefill_reason(self, messages: Sequence[Message]) -> str:
        """Why the template makes the next turn prefill part of the history again."""
        fmt = self._thinking.format
        if fmt.active and fmt.drops_history and self._thinking.history == "template" \
                and any(m.thinking for m in messages):
            return "the template drops earlier thoughts"
        return "the template rewrites the history"

    def reply_ids(self, message_id: str) -> list[int]:
        """A reply's token ids as the model reads it back: its templated path's tokens after
        the prompt that asked for it, without the end-of-turn marker."""
        tree = self._conversation.tree
        reply = tree[tree.resolve(message_id)]
        system = self._conversation.messages[:self._conversation.n_system]
        head = self.prompt_ids(system + tree.path_to(reply.parent))
        full = self.prompt_ids(system + tree.path_to(reply.id), add_generation_prompt=False)
        body = full[common_prefix(head, full):]
        described = self._backend.describe(body)
        ends = [i for i, t in enumerate(described) if t.special]
        if ends and not "".join(t.piece for t in described[ends[-1] + 1:]).strip():
            described = described[:ends[-1]]  # the end-of-turn marker and the line break after it
        while described and described[-1].special:
            described.pop()
        return [t.id for t in described]

    def unscored_start(self, reply: str, steps: Sequence[TokenProbs]) -> list[int]:
        """The ids of a reply's start that its probabilities leave out (a start forced by a branch
        from a token): the tokens of `reply_ids` that spell it, or InputError if none cut there."""
        content = self._conversation.tree[reply].content
        pieces = "".join(s.token for s in steps)
        start = content[:len(content) - len(pieces)] if content.endswith(pieces) else None
        if start == "":
            return []
        if start is not None:
            tokens, spelled = self._backend.describe(self.reply_ids(reply)), ""
            for i, found in enumerate(tokens):
                if spelled == start:
                    return [t.id for t in tokens[:i]]
                spelled += "" if found.special else found.piece
        raise InputError(f"reply {reply}'s probabilities do not match its text: score it again (Alt+P)")

    # --- tools (chatapp.engine.tools) ----------------------------------------------------------
    @property
    def tool_format(self) -> str:
        """"template" when the model's own template renders tools, "generic" when chatapp lists
        them in the system message (chatapp.engine.chat.tool_prompt)."""
        return self._tool_prompt.format

    @property
    def tool_syntax(self) -> str:
        """How the model writes a call: hermes, mistral, llama3 or generic (chatapp.engine.tools.calls)."""
        return self._tool_prompt.syntax

    def tool_costs(self, tools: Sequence[ToolSpec] | None = None) -> ToolCosts:
        """What tools (the offered ones by default) cost in prompt tokens, each and together:
        the system prompt rendered and tokenized with and without them, the difference."""
        tools = self.tools if tools is None else tools
        system = self._conversation.messages[:self._conversation.n_system]

        def count(offered: Sequence[ToolSpec]) -> int:
            def render(messages, *, add_generation_prompt):
                return self._tool_prompt.render(messages, add_generation_prompt=add_generation_prompt, tools=offered)
            return len(prompt_tokens.prompt_ids(self._backend, render, system, add_generation_prompt=False))

        return tool_costs(count, tools, self.tool_format)
