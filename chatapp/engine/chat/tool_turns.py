"""A turn with tools: the model's reply is read for calls (chatapp.engine.tools.calls), each
call is shown to whoever approves (approve once, always for this tool of this server as it is
described now, or deny), the approved ones run, every result (a denial included) goes back to
the model as a "tool" message, and the model goes on, until it answers without a call or
`max_steps` is hit.

`tool_choice` as in the OpenAI API: "auto" (the model decides), "none" (no tools offered),
"required" (the first reply must be a call to one of them) or a tool's name (the first reply
must call that one). The last two are kept to by a grammar (chatapp.engine.tools.grammar).

Each step is an ordinary turn of the engine, with its own TurnDone and record: its prefill
reuses the cache, so a step after a result prefills only the result and the template's glue.
Each step's record carries the tools' schema tokens (`tool_schema_tokens`, `tool_glue_tokens`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from chatapp.engine.events import Event, TurnDone
from chatapp.engine.tools.calls import parse_calls
from chatapp.engine.tools.grammar import call_grammar
from chatapp.engine.tools.registry import ToolRegistry
from chatapp.engine.tools.spec import ToolCall, ToolResult, ToolSpec
from chatapp.errors import InputError

if TYPE_CHECKING:
    from chatapp.engine.chat.engine import Engine

Approval = Literal["once", "always", "deny"]
CHOICES = ("auto", "none", "required")
DENIED = "The user denied this call; it did not run."
MAX_STEPS = 4
CUT = {"length": "at the reply's token limit (max_tokens)", "context": "by the full context"}
"""How a reply that had to be a call can end before the call does, in words: its finish_reason."""


@dataclass(frozen=True)
class ToolCallDone:
    """One call of a step: asked, approved or not, and what it gave back."""

    call: ToolCall
    server: str
    approved: bool
    result: ToolResult
    result_tokens: int
    why: str = ""
    """Why it did not run ("denied", "not offered"), "" when it ran."""

    def to_json(self) -> dict:
        return {"name": self.call.name, "server": self.server, "arguments": self.call.arguments,
                "approved": self.approved, "result": self.result.text, "result_tokens": self.result_tokens,
                "error": self.result.error}


@dataclass
class ToolTurns:
    """The tools of one conversation: which are offered, the choice, and the "always" approvals."""

    engine: Engine
    registry: ToolRegistry
    offered: Sequence[ToolSpec]
    approve: Callable[[ToolCall, ToolSpec], Approval]
    """Asked before each call runs, on the thread running the turn (the TUI blocks it on a dialog)."""
    choice: str = "auto"
    max_steps: int = MAX_STEPS
    always: dict[str, ToolSpec] = field(default_factory=dict)
    """The tools approved "always", by their approval_key: one tool of one server as it was
    described when approved (a changed schema, or the same name elsewhere, is asked for again)."""

    def __post_init__(self) -> None:
        names = {t.name for t in self.offered}
        if self.choice not in CHOICES and self.choice not in names:
            raise InputError(f"--tool-choice must be auto, none, required or an offered tool's name "
                             f"({', '.join(sorted(names)) or 'none offered'}), got {self.choice!r}")
        if self.choice == "required" and not self.offered:
            raise InputError("--tool-choice required needs a tool to offer (--tool NAME or --tools)")
        self.engine.set_tools([] if self.choice == "none" else self.offered)

    def _first_grammar(self):
        messages = self.engine.messages
        if messages and messages[-1].role == "tool":  # a result edited: the model answers it, as in a loop
            return None
        if self.choice == "required":
            return call_grammar(self.offered, self.engine.tool_syntax)
        if self.choice not in CHOICES:
            return call_grammar([t for t in self.offered if t.name == self.choice], self.engine.tool_syntax)
        return None

    def run(self, first: Callable[[], Iterator[Event]]) -> Iterator[Event | ToolCallDone]:
        """The events of `first` (engine.send(...) and the like, not yet started) and of every
        step after it, with a ToolCallDone after each step's TurnDone for each call it made."""
        grammar, start, step, before = self._first_grammar(), first, 0, set()
        costs = self.engine.tool_costs() if self.engine.tools else None
        while True:
            step += 1
            self.engine.set_generation(grammar=grammar)
            done: TurnDone | None = None
            try:
                for event in start():
                    if isinstance(event, TurnDone):
                        done = event
                        continue
                    yield event
            finally:
                self.engine.set_generation(grammar=None)
            if done is None:
                return
            if costs is not None:  # what the schemas cost each step's prompt (the panels show it)
                done.record.extra.update(tool_schema_tokens=dict(costs.per_tool), tool_glue_tokens=costs.glue)
            calls = parse_calls(done.record.reply, self.engine.tools)[0] if self.choice != "none" else []
            if not calls or done.record.finish_reason == "stopped":
                if not calls and grammar is not None and done.record.finish_reason in CUT:
                    # The grammar made the reply a call, and the limit came before its end.
                    done.record.extra["tool_loop_end"] = (f"the call was cut {CUT[done.record.finish_reason]} "
                                                          "before it was whole; it was not run")
                yield done
                return
            asked = {(c.name, json.dumps(c.arguments, sort_keys=True)) for c in calls}
            if asked <= before:  # a small model copies its last call: running it again tells it nothing new
                done.record.extra["tool_loop_end"] = "the model repeated its last call; it was not run again"
                yield done
                return
            before = asked
            finished = [self._one(call) for call in calls]
            done.record.extra.update(tool_calls=[f.to_json() for f in finished], tool_step=step)
            if step >= self.max_steps:
                done.record.extra["tool_loop_end"] = f"{self.max_steps} steps, the most a turn takes; results not sent"
            yield done
            yield from finished
            if step >= self.max_steps:
                return
            grammar = None
            results = [f.result.text for f in finished]
            start = lambda results=results: self.engine.send_tool_results(results)  # noqa: E731

    def _one(self, call: ToolCall) -> ToolCallDone:
        offered = {t.name: t for t in self.offered}
        spec = offered.get(call.name)
        if spec is None:
            result = ToolResult(f"there is no tool named {call.name!r} (the tools: {', '.join(offered)})", error=True)
            return ToolCallDone(call, "", False, result, self._tokens(result.text), "not offered")
        approved = spec.approval_key in self.always
        if not approved:
            answer = self.approve(call, spec)
            if answer == "always":
                self.always[spec.approval_key] = spec
            approved = answer in ("once", "always")
        if not approved:
            result = ToolResult(DENIED, error=True)
            return ToolCallDone(call, spec.server, False, result, self._tokens(result.text), "denied")
        result = self.registry.call(call)
        return ToolCallDone(call, spec.server, True, result, self._tokens(result.text))

    def _tokens(self, text: str) -> int:
        return len(self.engine.tokenize(text)) if text else 0
