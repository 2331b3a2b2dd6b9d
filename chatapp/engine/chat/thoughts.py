"""A thinking model's side of the conversation owner: its format (found from the template on
first use), its budget and history choice, the running turn's steering, and the turn's reply
split into thought and answer events (the format and the parser: chatapp.engine.thinking)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import replace
from functools import partial

from chatapp.config import ThinkingHistory, Settings, validate
from chatapp.engine.backend import Backend
from chatapp.engine.events import Message, PromptToken, TextDelta, ThoughtDelta
from chatapp.engine.models.template import THINKING_ON
from chatapp.engine.thinking import (
    NO_THINKING, Steering, ThinkingFormat, ThoughtEnd, ThoughtSplitter, detect, kept_text, render_history, split_reply)
from chatapp.engine.tokens import common_prefix
from chatapp.errors import InputError


def parse_think(text: str) -> int | None:
    """A thinking mode as typed ("on", "off", "512", "512 tokens"; -1 as in the config) as a
    budget: None for no budget, 0 for off. Raises ChatappError in one line."""
    word = text.strip().lower()
    if word in ("on", "off"):
        return None if word == "on" else 0
    try:
        budget = int(word.removesuffix("tokens").strip())
    except ValueError:
        raise InputError(f"thinking is on, off or a budget in tokens (e.g. 512), not {text.strip()!r}") from None
    validate(Settings(think_budget=budget))  # one line when out of range
    return None if budget < 0 else budget


def think_mode(budget: int | None) -> str:
    """The mode a budget means, as `parse_think` reads it back."""
    return "on" if budget is None else "off" if budget == 0 else str(budget)


SWITCHED_OFF = {"enable_thinking": False}
"""The template switch that turns thinking off (Qwen3 and its successors; llama-server's
`chat_template_kwargs` takes the same)."""
SWITCHED_ON = THINKING_ON
"""The same switch on, as llama-server renders a thinking template unless told otherwise."""


class Thinking:
    """What the engine knows and does about thoughts for one backend."""

    def __init__(self, backend: Backend, settings: Settings) -> None:
        self._backend = backend
        self._format: ThinkingFormat | None = None
        self.budget: int | None = None if settings.think_budget < 0 else settings.think_budget
        """Thought tokens per reply before the close is forced; None: no budget."""
        self.history: ThinkingHistory = settings.thinking_history
        self.budget_message = settings.think_budget_message
        """Forced into the thought before its close when the budget runs out ("" for none)."""
        self._steer: Steering | None = None
        self._generated: dict[str, str] = {}
        """Replies' text exactly as decoded, by message id, for "keep" (`kept_text`)."""
        self._end: tuple[str, ThoughtEnd] | None = None
        self._switchable: bool | None = None
        """The last turn's reply and where its thought ended in the cache (think more)."""

    @property
    def format(self) -> ThinkingFormat:
        """The model's thinking format, from what its template renders (probed once)."""
        if self._format is None:
            try:
                self._format = detect(self._render_dicts, self._is_one_special,
                                      partial(self._render_dicts, switches=SWITCHED_OFF))
            except Exception:  # noqa: BLE001 - a backend that cannot render the probes: no thinking
                self._format = NO_THINKING
        return self._format

    def _render_dicts(self, messages: list[dict[str, str]], add_generation_prompt: bool,
                      switches: dict[str, bool] | None = None) -> str:
        return self._backend.render([Message(m["role"], m["content"], thinking=m.get("reasoning_content", ""))
                                     for m in messages], add_generation_prompt=add_generation_prompt,
                                    **({"switches": switches} if switches is not None else {}))

    def _is_one_special(self, piece: str) -> bool:
        tokens = [t for t in self._backend.describe(self._backend.tokenize_prompt(piece)) if t.piece]
        return len(tokens) == 1 and tokens[0].special and tokens[0].piece == piece

    # --- the thinking mode: on, off, or a budget ------------------------------------------------
    @property
    def mode(self) -> str:
        """"on" (no budget), "off" (a budget of 0) or the budget in tokens, as `set_mode` takes it."""
        return think_mode(self.budget)

    def set_mode(self, text: str) -> str:
        """Thinking "on", "off", or a budget of N thought tokens a reply, from the next turn on
        (`parse_think`); returns the mode. Off renders the template with its own switch where it
        has one (Qwen3's `enable_thinking`: the generation prompt closes an empty thought, so no
        thought token is decoded), and elsewhere forces the close before the first thought token
        (a budget of 0, as llama-server's `--reasoning-budget 0`)."""
        self.budget = parse_think(text)
        return self.mode

    @property
    def switchable(self) -> bool:
        """The template turns thinking off itself: its generation prompt renders differently with
        `enable_thinking` false (probed once; a template that fails the probe is not)."""
        if self._switchable is None:
            probe = [Message("user", "chatapp-probe-question")]
            try:
                self._switchable = self._backend.render(probe, add_generation_prompt=True) != self._backend.render(
                    probe, add_generation_prompt=True, switches=SWITCHED_OFF)
            except Exception:  # noqa: BLE001 - a template that cannot render the probe has no switch to use
                self._switchable = False
        return self._switchable

    def switches(self) -> dict[str, bool]:
        """`enable_thinking` as llama-server sets it: true for a template it finds a thought in,
        unless thinking is off and the template has the switch; false for one it does not (whose
        switch may still change the prompt: Apertus writes "Deliberation: disabled")."""
        if not self.format.active or (self.budget == 0 and self.switchable):
            return SWITCHED_OFF
        return SWITCHED_ON

    def render(self, messages: Sequence[Message], add_generation_prompt: bool) -> str:
        switches = self.switches()
        if not any(m.thinking for m in messages):
            return self._backend.render(messages, add_generation_prompt=add_generation_prompt, switches=switches)
        return render_history(lambda placed: self._backend.render(placed, add_generation_prompt=add_generation_prompt,
                                                                  switches=switches),
                              messages, self.format, self.history,
                              lambda m, content: replace(m, content=content, thinking=""),
                              lambda m: self._generated.get(m.id, ""))

    def remember(self, message_id: str, reply: str, thinking: str, answer: str) -> str:
        """A reply's text as its turn decoded it (the backend's whole reply), so that "keep"
        renders it back token for token: rebuilt from its parts, the whitespace between the
        thought and the answer could differ, and every token after it would be prefilled again.
        Returns that text where it differs from the rebuilt one (for the turn's record, so that a
        resumed session renders it the same: `remember_decoded`), else ""."""
        text = kept_text(self.format, reply, thinking, answer) if self.format.active else ""
        if not text:
            return ""
        self._generated[message_id] = text
        return "" if text == self.format.kept_content(thinking, answer) else text

    def remember_decoded(self, texts: dict[str, str]) -> None:
        """Replies' text as decoded, from a saved session's turn records ("reply_as_decoded")."""
        self._generated.update({mid: text for mid, text in texts.items() if text})

    def forget(self) -> None:
        self._generated.clear()
        self._end = None

    def marker_ids(self, text: str) -> list[int]:
        """Text the model would write (markers as their own tokens where the vocabulary has them),
        without the BOS a prompt's tokenization may add."""
        ids = self._backend.tokenize_prompt(text)
        described = self._backend.describe(ids[:1])
        if ids and described and described[0].special and not text.startswith(described[0].piece):
            ids = ids[1:]
        return ids

    def continued_ids(self, text: str) -> list[int]:
        """`marker_ids(text)` as they come out when the answer's text follows: the forced close's
        last tokens as the template's history will tokenize them (a "\n\n" alone is one token,
        before a word two), so that keeping the thought reuses the cache past it."""
        ids = self.marker_ids(text + "A")
        last = self._backend.describe(ids[-1:])
        if last and not last[0].special and last[0].piece == "A":
            return ids[:-1]
        return self.marker_ids(text)

    def steering(self, more: tuple[int, ThoughtEnd | None] | None = None) -> Steering | None:
        """A new turn's steering, or None for a model that does not think. `more`: think more,
        (the extra budget, the thought end it goes on from where the cache still has it)."""
        fmt = self.format
        budget, resume = (self.budget, None) if more is None else more
        if not fmt.active:
            self._steer = None
            return None
        message = self.budget_message if budget else ""  # not when thinking is off (a budget of 0)
        self._steer = Steering(fmt, self.continued_ids(fmt.forced_close), budget,
                               self.continued_ids(message + fmt.forced_close) if message else (),
                               resume=resume, more=more is not None)
        return self._steer

    def ended(self, message_id: str, cached: int) -> None:
        """The turn that wrote reply `message_id` is over, leaving `cached` tokens in the cache:
        where its thought ended is kept for think more (when it closed, or the turn ended in it)."""
        steer = self._steer
        end = steer.end if steer is not None else None
        self._end = (message_id, end) if end is not None and (steer.splitter.split.closed or end.position == cached) \
            else None

    def end_of(self, message_id: str) -> ThoughtEnd | None:
        """Where reply `message_id`'s thought ended in the cache, when its turn was the last one."""
        return self._end[1] if self._end is not None and self._end[0] == message_id else None

    def thought_ids(self, thinking: str) -> list[int]:
        """A thought's text as the reply's first tokens (after the generation prompt): the opening
        marker first where the model writes it."""
        fmt = self.format
        return self.marker_ids(("" if fmt.prompt_opening else fmt.open) + thinking)

    def answer_now(self) -> bool:
        """Stop thinking and answer: the running turn forces the thought's close at its next
        token. False when no thought is running to stop."""
        steer = self._steer
        if steer is None or steer.forced_at is not None or steer.splitter.split.closed:
            return False
        steer.asked_at = steer.thought_tokens
        steer.answer_now.set()
        return True

    @staticmethod
    def reprefill_held(cached: Sequence[int], history_ids: Sequence[int], glue: int, whole: bool) -> int:
        """How much of the conversation before the next question (`history_ids`, its prompt
        without the generation prompt) the cache stands for: all of it but the `glue` after the
        last message (its end of turn, never decoded into the cache) when the cache is that path's
        as its last turn left it (`whole`: maybe cut back where a save dropped what no longer
        matched), else what the cache holds at those places."""
        return len(history_ids) - glue if whole else min(len(cached), len(history_ids) - glue)

    def reprefill_expected(self, cached: Sequence[int], history_ids: Sequence[int], glue: int, whole: bool,
                           next_ids: Sequence[int]) -> int:
        """The tokens of that part the next turn prefills again: those past where the cache and
        `next_ids`, what the next turn's prompt starts with, part (a template that drops earlier
        thoughts rewrites them). 0 when the next prompt starts with what the cache holds."""
        return max(0, self.reprefill_held(cached, history_ids, glue, whole) - common_prefix(cached, next_ids))


class TurnSplit:
    """A turn's TextDelta events split into ThoughtDelta and TextDelta, with the thought's
    decode tokens and time (as the live figures stood when its close was read)."""

    def __init__(self, fmt: ThinkingFormat | None) -> None:
        self.fmt = fmt
        self._splitter = ThoughtSplitter(fmt) if fmt is not None and fmt.active else None
        self.thinking_tokens = 0
        self.thinking_ms = 0.0
        self._live = None

    def feed(self, event: TextDelta) -> Iterator[TextDelta | ThoughtDelta]:
        if self._splitter is None:
            yield event
            return
        was_open = self._splitter.in_thought
        thought, answer = self._splitter.feed(event.text)
        self._live = event.live
        if was_open or thought or self._splitter.in_thought:
            self.thinking_tokens, self.thinking_ms = event.live.decode_tokens, event.live.decode_ms
        if thought:
            yield ThoughtDelta(thought, event.live)
        if answer:
            yield TextDelta(answer, event.live)

    def finish(self) -> Iterator[TextDelta | ThoughtDelta]:
        if self._splitter is None or self._live is None:
            return
        thought, answer = self._splitter.finish()
        if thought:
            yield ThoughtDelta(thought, self._live)
        if answer:
            yield TextDelta(answer, self._live)

    def parts(self, reply: str) -> tuple[str, str]:
        """(answer, thought) of the whole reply."""
        if self._splitter is None:
            return reply, ""
        split = split_reply(self.fmt, reply)
        return split.answer, split.thinking


def label_thoughts(view: list[PromptToken], fmt: ThinkingFormat) -> list[PromptToken]:
    """A turn's token view with every thought's tokens (its markers included) given the role
    "thought": the reply's own, and earlier ones the prompt keeps ("keep"), so the panels count
    thoughts apart from answers. A thought is found from the markers in the text; one left open
    runs to the end (a reply that ended inside it). Tokens of a user's or a system's text stay theirs."""
    if not fmt.active or not view:
        return view
    starts, text = [], ""
    for item in view:
        starts.append(len(text))
        text += item.token.piece
    spans, at = [], 0
    while (found := text.find(fmt.open, at)) >= 0:
        close = text.find(fmt.close, found + len(fmt.open))
        end = len(text) if close < 0 else close + len(fmt.close)
        spans.append((found, end))
        at = end
    if not spans:
        return view
    labelled, span = [], 0
    for item, start in zip(view, starts):
        while span < len(spans) and spans[span][1] <= start:
            span += 1
        inside = span < len(spans) and spans[span][0] <= start < spans[span][1]
        keep = item.role in ("system", "user", "retrieved")
        labelled.append(replace(item, role="thought") if inside and not keep else item)
    return labelled
