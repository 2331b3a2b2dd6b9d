"""One streamed /completion as it comes, held to the turn's bounds.

The server is not trusted to keep them: a reply that goes past the tokens asked for
(max_tokens) or past the server's own context, a last event that says the slot holds more
than the context, or a stream with more events than such a turn can have, raises Overrun,
and the backend ends the turn there with one line, the reply so far kept. Without this a
server that ignores n_predict streamed 5,349 tokens for a max_tokens of 5, and the record
said KV 5373/4096.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from chatapp.engine.events import BackendEvent, PrefillDone, PrefillProgress, TextDelta
from chatapp.engine.server import answers
from chatapp.engine.stats import LiveDecode
from chatapp.errors import ServerError

EXTRA_EVENTS = 16
"""Events a stream may have beyond one per prompt token (progress comes a batch at a time) and
one per reply token: the final one, and room to spare."""


class Overrun(ServerError):
    """The server sent past what the turn allows."""


@dataclass
class ReplyRun:
    """What one /completion stream has said so far, held to the turn's bounds."""

    n_prompt: int
    reuse_broken_at: int | None
    max_tokens: int
    n_ctx: int
    server: str
    """"llama-server at URL", for the lines that say it broke the bounds."""
    events: int = 0
    cache: int = 0
    processed: int = 0
    progress_ms: float = 0.0
    progressed: bool = False
    prefill: PrefillDone | None = None
    predicted: int = 0
    timings: answers.Timings = field(default_factory=answers.Timings)
    reported_timings: bool = False
    segments: list[tuple[str, int | None, int]] = field(default_factory=list)
    """(text, last token id, tokens) per streamed piece of the reply."""
    final: answers.Event | None = None
    probabilities: list[answers.TokenLogprobs] = field(default_factory=list)
    """Each streamed token's raw top candidates, when the request asked for them (n_probs)."""

    def take(self, event: answers.Event) -> Iterator[BackendEvent]:
        self.events += 1
        if self.events > self.n_prompt + self.max_tokens + EXTRA_EVENTS:
            raise Overrun(f"{self.server} sent more events than a turn of {self.n_prompt:,} prompt and "
                          f"{self.max_tokens:,} reply tokens has")
        if (p := event.prompt_progress) is not None:
            self.cache, self.processed, self.progress_ms = p.cache, p.processed, p.time_ms
            self.progressed = True
            yield PrefillProgress(max(p.processed - p.cache, 0), p.total - p.cache, p.time_ms)
            return
        if event.timings is not None:
            self.timings, self.reported_timings = event.timings, True
        if event.stop:
            if event.tokens_cached is not None and event.tokens_cached > self.n_ctx:
                raise Overrun(f"{self.server} says its slot holds {event.tokens_cached:,} tokens, more than its "
                              f"context of {self.n_ctx:,}")
            self.final = event
            return
        if self.prefill is None:
            self.prefill = self.prefill_done()
            yield self.prefill
        # Each piece is at least one more token, whatever the count it carries says.
        predicted = max(event.tokens_predicted or 0, self.predicted + 1)
        if predicted > self.max_tokens:
            raise Overrun(f"{self.server} went on past the {self.max_tokens:,} tokens asked for (max_tokens)")
        if self.n_prompt + predicted > self.n_ctx:
            raise Overrun(f"{self.server} went on past its context of {self.n_ctx:,} tokens")
        self.segments.append((event.content, event.tokens[-1] if event.tokens else None, predicted - self.predicted))
        self.probabilities.extend(event.completion_probabilities)
        self.predicted = predicted
        if event.content:
            yield TextDelta(event.content, LiveDecode(max(predicted - 1, 0), self.timings.predicted_ms,
                                                      self.n_prompt + predicted - 1))

    def prefill_done(self) -> PrefillDone:
        t = self.timings
        if not self.reported_timings:  # stopped while the prompt was read: what the progress said
            return PrefillDone(self.n_prompt, self.cache, max(self.processed - self.cache, 0), self.progress_ms,
                               self.reuse_broken_at)
        return PrefillDone(self.n_prompt, t.cache_n, t.prompt_n, t.prompt_ms, self.reuse_broken_at)
