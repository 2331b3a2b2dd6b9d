"""Thinking models: how a model's template marks its thoughts, and a reply split into thought
and answer as it streams.

The format is recognised from what the template renders (probe messages, after llama.cpp's
chat parser), not from a table of model names:
- `<think>…</think>` (Qwen3 and its successors, DeepSeek-R1 and its distills, SmolLM3): the
  markers appear in the template's source or as tokens of the vocabulary;
- a generation prompt that opens the thought itself (DeepSeek-R1: `<｜Assistant｜><think>\\n`):
  the reply then starts inside the thought;
- gpt-oss's harmony channels: the thought is the `analysis` channel, the answer `final`;
- Gemma 4's thought channel, `<|channel>thought\n…<channel|>`, which its generation prompt
  writes empty when thinking is off;
- Command R7B's `<|START_THINKING|>…<|END_THINKING|>`, the answer after `<|START_RESPONSE|>`.
Each kind's markers are one entry of FORMATS, found in what the template renders.

`detect` also renders a probe conversation to learn whether the template drops earlier turns'
thoughts (R1 and Qwen3 do): then turn N is not a prefix of turn N+1, and the engine can either
let the template drop them or keep them in the rendered history as they were generated
(`render_history`). `Steering` is what a backend needs to enforce a thinking budget and "stop
thinking and answer" in its decode loop. Nothing here imports a backend: it is given callables.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal

from chatapp.config import ThinkingHistory

ThinkingKind = Literal["none", "think-tags", "harmony", "channel", "command"]

THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
HARMONY_OPEN = "<|channel|>analysis<|message|>"
HARMONY_CLOSE = "<|end|><|start|>assistant<|channel|>final<|message|>"
HARMONY_FINAL = "<|channel|>final<|message|>"
"""What opens a harmony answer: after the thought's close, or first when the model skips its
thought, and before each earlier answer in the template's history."""

_PROBE_THOUGHT = "chatapp-probe-thought"
_PROBE_ANSWER = "chatapp-probe-answer"


@dataclass(frozen=True)
class ThinkingFormat:
    """How this model's replies carry their thoughts."""

    kind: ThinkingKind = "none"
    open: str = ""
    """The marker that opens a thought."""
    close: str = ""
    """The marker that ends it; the answer follows."""
    prompt_opening: str = ""
    """What the generation prompt itself opens the thought with (R1: "<think>\\n"); "" when the
    model writes the opening marker."""
    drops_history: bool = False
    """The template leaves earlier turns' thoughts out of the prompt."""
    separator: str = "\n\n"
    """What follows the closing marker before the answer, as these models write it."""
    answer_opening: str = ""
    """What opens an answer that comes without a thought (harmony's final channel header,
    Command R7B's response marker): not the answer's text, and where the template writes it
    before an earlier answer, "keep" puts the reply as decoded in its place."""
    close_lead: str = "\n"
    """What a forced close starts with, as the template ends a thought it writes (none for
    harmony's and Command R7B's)."""

    @property
    def active(self) -> bool:
        return self.kind != "none"

    @property
    def forced_close(self) -> str:
        """The text a budget or "answer now" forces: the marker and the separator (a budget's
        message, where one is set, goes before them: `Steering.budget_close_ids`)."""
        return self.close_lead + self.close + self.separator

    def kept_content(self, thinking: str, answer: str) -> str:
        """An assistant message's text as it was generated after the generation prompt's
        header: the opening (the prompt's own, or the marker), the thought, the closing marker,
        the separator and the answer."""
        opening = self.prompt_opening or self.open
        return f"{opening}{thinking}{self.close}{self.separator}{answer}"

    @property
    def markers(self) -> str:
        """Every marker's text: the ones a vocabulary has as control tokens are kept in the reply's
        text (a backend drops other control tokens), so the split can find them."""
        return self.open + self.close + self.separator + self.answer_opening

    def describe(self) -> str:
        if not self.active:
            return "no thinking markers"
        how = "the generation prompt opens the thought" if self.prompt_opening else "the model opens the thought"
        drops = "earlier thoughts dropped by the template" if self.drops_history else "earlier thoughts kept"
        return f"{self.kind} ({self.open}…{self.close}); {how}; {drops}"


NO_THINKING = ThinkingFormat()

GEMMA4_OPEN, GEMMA4_CLOSE = "<|channel>thought\n", "<channel|>"
COMMAND_OPEN, COMMAND_CLOSE, COMMAND_ANSWER = "<|START_THINKING|>", "<|END_THINKING|>", "<|START_RESPONSE|>"
FORMATS: tuple[tuple[str, ThinkingFormat], ...] = (
    # (what in the rendered probes tells the kind, its markers), tried in this order
    ("<|channel|>", ThinkingFormat("harmony", HARMONY_OPEN, HARMONY_CLOSE, separator="",
                                   answer_opening=HARMONY_FINAL, close_lead="")),
    (GEMMA4_OPEN, ThinkingFormat("channel", GEMMA4_OPEN, GEMMA4_CLOSE, separator="")),
    (COMMAND_OPEN, ThinkingFormat("command", COMMAND_OPEN, COMMAND_CLOSE, separator=COMMAND_ANSWER,
                                  answer_opening=COMMAND_ANSWER, close_lead="")),
)
"""Gemma 4 writes its empty thought channel in the generation prompt when thinking is off, and
Command R7B its empty thought: so a probe rendered without the switch shows the markers."""

Render = Callable[[list[dict[str, str]], bool], str]
"""Messages (role, content, maybe reasoning_content) through the chat template; the flag adds the
generation prompt."""


def detect(render: Render, vocabulary_has: Callable[[str], bool] = lambda piece: False,
           render_off: Render | None = None) -> ThinkingFormat:
    """The thinking format of a model from what its template renders for probe messages (a
    question; a reply with a thought given as `reasoning_content`, last and before another
    question), and whether its vocabulary has the markers as tokens of their own. `render_off`
    renders with thinking switched off, where Gemma 4 and Command R7B write their empty thought."""
    question = {"role": "user", "content": "chatapp-probe-question"}
    reply = {"role": "assistant", "content": _PROBE_ANSWER, "reasoning_content": _PROBE_THOUGHT}
    after = {"role": "user", "content": "chatapp-probe-next"}
    try:
        asked = render([question], False)
        prompted = render([question], True)
        last = render([question, reply], False)
        later = render([question, reply, after], True)
    except Exception:  # noqa: BLE001 - a template that cannot render the probes: no thinking known
        return NO_THINKING
    generation = prompted[len(asked):] if prompted.startswith(asked) else ""
    seen = prompted + last + later
    try:
        off = render_off([question], True) if render_off is not None else ""
    except Exception:  # noqa: BLE001 - a template whose switch breaks it: what the others render decides
        off = ""
    found = next((fmt for sign, fmt in FORMATS
                  if sign in seen + off and (fmt.kind != "harmony" or "analysis" in seen)), None)
    if found is None and (THINK_OPEN in seen or THINK_CLOSE in seen or vocabulary_has(THINK_CLOSE)):
        found = ThinkingFormat("think-tags", THINK_OPEN, THINK_CLOSE)
    if found is None:
        return NO_THINKING
    open_, close = found.open, found.close
    try:
        inline = render([question, {"role": "assistant", "content": f"{open_}{_PROBE_THOUGHT}{close}{_PROBE_ANSWER}"},
                         after], True)
    except Exception:  # noqa: BLE001
        inline = ""
    stripped = generation.rstrip()
    opening = open_ + generation[len(stripped):] if stripped.endswith(open_) else ""
    drops = _PROBE_THOUGHT not in later and _PROBE_THOUGHT not in inline
    return replace(found, prompt_opening=opening, drops_history=drops)


@dataclass
class Split:
    """A reply cut into its thought and its answer as it streams (see ThoughtSplitter)."""

    thinking: str = ""
    answer: str = ""
    closed: bool = False
    """The closing marker was seen (or there was no thought)."""


class ThoughtSplitter:
    """Feeds on reply text as it streams and says which part is thought and which is answer.
    Text that might be the start of a marker is held back until the next piece decides."""

    def __init__(self, fmt: ThinkingFormat) -> None:
        self.fmt = fmt
        self.split = Split()
        self._pending = ""
        self._state = "thought" if fmt.prompt_opening else ("before" if fmt.active else "answer")
        if not fmt.active:
            self.split.closed = True

    @property
    def in_thought(self) -> bool:
        return self._state in ("thought",)

    def feed(self, text: str) -> tuple[str, str]:
        """(thought text, answer text) that this piece makes certain."""
        if self._state == "answer":
            self.split.answer += text
            return "", text
        self._pending += text
        thought, answer = "", ""
        while True:
            if self._state == "before":
                body = self._pending.lstrip()
                if body.startswith(self.fmt.open):
                    self._pending = body[len(self.fmt.open):]
                    self._state = "thought"
                    continue
                skip = self.fmt.answer_opening
                if skip and body.startswith(skip):  # an answer without a thought: its header is not its text
                    self._pending = body[len(skip):]
                    self._state = "gap"
                    self.split.closed = True
                    continue
                if self.fmt.open.startswith(body) or (skip and skip.startswith(body)):  # maybe a marker
                    break
                self._state, answer, self._pending = "answer", answer + self._pending, ""
                self.split.closed = True
                break
            if self._state == "thought":
                at = self._pending.find(self.fmt.close)
                if at >= 0:
                    thought += self._pending[:at]
                    self._pending = self._pending[at + len(self.fmt.close):]
                    self._state = "gap"
                    self.split.closed = True
                    continue
                keep = _partial_suffix(self._pending, self.fmt.close)
                thought += self._pending[:len(self._pending) - keep]
                self._pending = self._pending[len(self._pending) - keep:]
                break
            if self._state == "gap":  # the separator before the answer is not the answer's
                body = self._pending.lstrip()
                marker = self.fmt.separator.strip()  # Command R7B's response marker; whitespace for the rest
                if not body or (marker and marker.startswith(body)):
                    break
                if marker and body.startswith(marker):
                    body = body[len(marker):]
                self._state, answer, self._pending = "answer", answer + body, ""
                break
            break
        self.split.thinking += thought
        self.split.answer += answer
        return thought, answer

    def finish(self) -> tuple[str, str]:
        """What was held back, at the reply's end: a thought never closed stays a thought."""
        rest, self._pending = self._pending, ""
        if self._state == "thought":
            self.split.thinking += rest
            return rest, ""
        if self._state == "before":
            self.split.answer += rest
            return "", rest
        if self._state == "gap" and (body := rest.lstrip()):  # text that only might have been the marker
            self.split.answer += body
            return "", body
        return "", ""


def _partial_suffix(text: str, marker: str) -> int:
    """The length of the longest end of `text` that starts `marker`."""
    for n in range(min(len(text), len(marker) - 1), 0, -1):
        if marker.startswith(text[-n:]):
            return n
    return 0


def split_reply(fmt: ThinkingFormat, reply: str) -> Split:
    """A whole reply's thought and answer."""
    splitter = ThoughtSplitter(fmt)
    splitter.feed(reply)
    splitter.finish()
    return splitter.split


@dataclass(frozen=True)
class ThoughtEnd:
    """Where a turn's thought ended in the cache, for "think more": the cache position of the
    close's first token, the logits after the last thought token (as the backend's decode left
    them, a copy), and the token the model chose there to close its thought (None when chatapp
    forced the close). Given back, the cache is cut to `position` and the next thought token is
    sampled from `logits`, so nothing is run again."""

    position: int
    logits: object
    closing_token: int | None = None


@dataclass
class Steering:
    """What a backend's decode loop needs to keep a thought in bounds: the format, the budget
    (thought tokens before the close is forced; None: no limit), the close's token ids, and
    an event that "stop thinking and answer" sets from another thread."""

    fmt: ThinkingFormat
    close_ids: Sequence[int]
    budget: int | None = None
    budget_close_ids: Sequence[int] = ()
    """What the budget forces when it runs out, where it differs from `close_ids`: its message
    (llama-server's --reasoning-budget-message), then the close."""
    answer_now: threading.Event = field(default_factory=threading.Event)
    splitter: ThoughtSplitter = field(init=False)
    thought_tokens: int = 0
    forced_at: int | None = None
    """The thought token after which the close was forced; None when the model closed it."""
    forced_because: str = ""
    asked_at: int | None = None
    """The thought tokens sampled when "answer now" was asked for (from another thread): the
    tokens sampled after it, before the close was forced, are the key's latency in tokens."""
    resume: ThoughtEnd | None = None
    """Think more: the earlier turn's thought end this turn goes on from (its forced tokens are
    that turn's reply up to there); the backend cuts the cache there and reuses its logits."""
    end: ThoughtEnd | None = None
    """Where this turn's thought ended (`mark_end`, by the backend), once it has."""
    more: bool = False
    """A think-more turn: an end of turn inside the thought forces its close (`ended_inside`)."""

    def __post_init__(self) -> None:
        self.splitter = ThoughtSplitter(self.fmt)

    def started(self, text: str) -> None:
        """Text given before decoding starts (forced reply tokens)."""
        self.splitter.feed(text)

    def after(self, text: str, *, sampled: bool = True) -> None:
        """Called with each decoded token's text, forced ones too (`sampled` False): counts the
        thought's sampled tokens, the ones a budget limits."""
        was_in = self.splitter.in_thought
        self.splitter.feed(text)
        if sampled and was_in and self.splitter.in_thought:
            self.thought_tokens += 1

    def ended_inside(self) -> Sequence[int]:
        """The model ended its turn inside the thought: on a think-more turn (`resume`, or
        `more`) the close is forced instead, so the thought it went on with gets its answer; ()
        on any other turn (the turn ends there, as the model chose)."""
        if not self.more or self.forced_at is not None or not self.splitter.in_thought:
            return ()
        self.forced_at, self.forced_because = self.thought_tokens, "end of turn"
        return self.close_ids

    def may_close(self, text: str) -> bool:
        """The next token (its text) may start the thought's close: the backend then marks the
        end before running it (the close is certain only a token or two later)."""
        return self.forced_at is None and self.splitter.in_thought and bool(text) and self.fmt.close[:1] in text

    def mark_end(self, position: int, logits: object, closing_token: int | None) -> None:
        if logits is not None:
            self.end = ThoughtEnd(position, logits, closing_token)

    def due(self) -> Sequence[int]:
        """The close's ids when it must be forced now, else ()."""
        if self.forced_at is not None or not self.splitter.in_thought:
            return ()
        if self.answer_now.is_set():
            self.forced_because = "answer now"
        elif self.budget is not None and self.thought_tokens >= self.budget:
            self.forced_because = "budget"
            self.forced_at = self.thought_tokens
            return self.budget_close_ids or self.close_ids
        else:
            return ()
        self.forced_at = self.thought_tokens
        return self.close_ids

    def record(self) -> dict:
        out: dict = {"thought_tokens_sampled": self.thought_tokens}
        if self.budget is not None:
            out["think_budget"] = self.budget
        if self.forced_at is not None:
            out["thinking_closed_by"] = self.forced_because
            if self.forced_because == "answer now" and self.asked_at is not None:
                out["answer_now_extra_tokens"] = self.forced_at - self.asked_at
        return out


def render_history(render: Callable[[list], str], messages: Sequence, fmt: ThinkingFormat,
                   history: ThinkingHistory, replace_content: Callable[[object, str], object],
                   generated: Callable[[object], str] | None = None) -> str:
    """The conversation through the template, with earlier thoughts as `history` says: "template"
    renders as the template does; "keep" puts each reply's thought back where it was generated
    (each kept reply goes in as a placeholder the template cannot cut, then is written back).
    `generated` gives a reply's text exactly as it was decoded where it is known (see
    `kept_text`), else the text is rebuilt from its parts (`ThinkingFormat.kept_content`)."""
    if history == "template" or not fmt.active or not any(getattr(m, "thinking", "") for m in messages):
        return render(list(messages))
    kept: dict[str, str] = {}
    placed = []
    for i, message in enumerate(messages):
        if message.role == "assistant" and message.thinking:
            mark = f"\ue000chatapp-kept-{i}\ue001"
            kept[mark] = (generated(message) if generated else "") or fmt.kept_content(message.thinking,
                                                                                     message.content)
            message = replace_content(message, mark)
        placed.append(message)
    text = render(placed)
    for mark, content in kept.items():
        headed = fmt.answer_opening + mark  # harmony: the template's answer header, then the mark
        text = text.replace(headed, content) if fmt.answer_opening and headed in text else text.replace(mark, content)
    return text


def kept_text(fmt: ThinkingFormat, reply: str, thinking: str, answer: str) -> str:
    """A reply as it was decoded after the generation prompt, for "keep": the prompt's own opening
    (R1's), then `reply` as the backend wrote it (the whitespace between the thought's close and
    the answer included, which the answer leaves out), when it splits into this thought and
    answer; "" when it does not (then the text is rebuilt from the parts)."""
    split = split_reply(fmt, reply)
    if (split.thinking, split.answer) != (thinking, answer) or not thinking:
        return ""
    return fmt.prompt_opening + reply
