"""Speculative decode steps: draft by prompt lookup, verify in one batch, keep what the model agrees with.

`SpeculativeDecoder.step()` replaces one iteration of the plain decode loop ("sample a token,
decode it"). Each step makes exactly one llama_decode call:

1. The head: the token sampled from the current logits row, or the correction left pending by
   the step before (already emitted, not yet in the cache).
2. Drafts: the drafter's continuation after the head, up to its first end-of-generation token;
   the policy says how many to verify.
3. One decode of [head, d1 .. dk] with logits at every row. Row i is the distribution of the
   token after batch[i], so d(i+1) is checked against row i.
4. Acceptance (tests.engine.drafting.acceptance): the row is sampled with the turn's own sampler chain
   and the draft is accepted iff the sample equals it. That is the speculative-sampling rule for
   a deterministic draft (accept d with probability p(d); otherwise a draw from p without d), so
   every emitted token is distributed exactly as without drafts. At temperature 0 the sampler is
   greedy: accepted iff the draft is the argmax. Each emitted token costs one draw, as in the
   plain loop, so with a fixed seed and logits equal to a plain step's the reply is the same.
5. The first rejected row's sample is emitted as a correction and left pending (it heads the
   next step); the cells of the rejected drafts are removed, so the cache keeps the head and
   the accepted drafts and the target's count stays equal to llama.cpp's. When every draft is
   accepted, the last row stays current for the next step, as after a plain step.

Plain steps also compare the drafter's guess with the sampled token ("shadow" checks, no extra
decode), so the policy always knows how well drafts would do. An end-of-generation token ends
the step: it is emitted (for the caller to see) but never kept in the cache.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from chatapp.engine.drafting.policy import DraftPolicy
from chatapp.engine.drafting.lookup import Draft, NgramDrafter
from chatapp.engine.stats import DraftFigures


class Target(Protocol):
    """The model side: one sequence's KV cache and the turn's sampler."""

    n_cached: int

    def decode(self, tokens: Sequence[int]) -> None:
        """Append tokens to the cache in one llama_decode, with logits at every row."""

    def sample(self, row: int) -> int:
        """Draw from logits row `row` of the last decode (-1: its last) with the turn's sampler."""

    def truncate(self, n: int) -> None:
        """Keep the first n cells of the cache, and count n."""


@dataclass(frozen=True)
class Step:
    tokens: tuple[int, ...]
    """Emitted this step, in order. The last may be pending (not in the cache yet) or an end token."""
    from_draft: tuple[bool, ...]
    """Per emitted token: an accepted draft (the Tokens panel tints these)."""
    batch: int
    """Tokens in this step's llama_decode (0 when nothing was decoded)."""
    drafted: int
    accepted: int
    ms: float
    ended: bool = False
    """The last token is an end-of-generation token; it is not in the cache."""
    full: bool = False
    """The cache had no room for the head; it is emitted and pending."""


@dataclass
class DraftStats:
    """A turn's drafting, for the Speed panel and the record."""

    steps: int = 0
    drafted: int = 0
    accepted: int = 0
    by_position: list[list[int]] = field(default_factory=list)
    """[accepted, drafted] per draft position (1st, 2nd, ...)."""
    decode_ms: float = 0.0
    """Wall time of the steps: llama.cpp's perf counters book multi-token batches as prompt."""
    baseline_ms: float | None = 0.0
    """What plain steps would have taken for the same tokens, at the measured one-token step time
    (None once a verify step ran before any plain step was timed: then nothing says)."""
    tokens: int = 0
    """Tokens added to the cache by the steps."""

    def figures(self) -> DraftFigures:
        return DraftFigures(self.steps, self.tokens, self.drafted, self.accepted,
                            tuple((a, d) for a, d in self.by_position), self.decode_ms, self.baseline_ms)

    @property
    def acceptance(self) -> float:
        return self.figures().acceptance

    @property
    def tokens_per_step(self) -> float:
        return self.figures().tokens_per_step

    @property
    def speedup(self) -> float:
        return self.figures().speedup

    def count(self, outcomes: Sequence[bool]) -> None:
        while len(self.by_position) < len(outcomes):
            self.by_position.append([0, 0])
        for position, accepted in zip(self.by_position, outcomes):
            position[0] += accepted
            position[1] += 1
        self.drafted += len(outcomes)
        self.accepted += sum(outcomes)


class SpeculativeDecoder:
    def __init__(self, target: Target, is_end: Callable[[int], bool], *, drafter: NgramDrafter | None = None,
                 policy: DraftPolicy | None = None, clock: Callable[[], float] = time.perf_counter):
        self.target = target
        self.is_end = is_end
        self.drafter = drafter if drafter is not None else NgramDrafter()  # an empty one is falsy (len 0)
        self.policy = policy or DraftPolicy()
        self.clock = clock
        self.stats = DraftStats()
        self.pending: int | None = None
        self._row = -1
        self._context = 0  # the drafter's tokens before the reply
        self._guess: Draft | None = None  # the last step's guess, none of it verified, the context unchanged

    def begin(self, context: Sequence[int]) -> None:
        """A new reply after a prefill of `context` (the cache's tokens); the policy's figures carry over."""
        self.drafter.follow(context)
        self._context = len(self.drafter)
        self.stats = DraftStats()
        self.pending = None
        self._row = -1
        self._guess = None

    def step(self, max_emit: int, max_cells: int, *, draft: bool = True) -> Step:
        """One decode step; emits at most `max_emit` tokens and adds at most `max_cells` cells.

        `draft=False` makes it a plain step (the shadow check still runs): for steps whose time
        must not mix with verify batches, such as while the thread count is being measured.
        """
        started = self.clock()
        emitted: list[int] = []
        if self.pending is None:
            # The last step's guess, when that step verified none of it, was drawn from this same
            # context: looking it up again cost ~15 µs a step of open chat (profiled in the loop).
            shadow = self._guess if self._guess is not None else self.drafter.draft(1)
            self._guess = None
            head = self.target.sample(self._row)
            if shadow.tokens:
                self.policy.observe(shadow.agreement, [shadow.tokens[0] == head])
            emitted.append(head)
            if self.is_end(head):
                return Step(tuple(emitted), (False,), 0, 0, 0, (self.clock() - started) * 1000, ended=True)
            self.drafter.append(head)
        else:
            head, self.pending = self.pending, None
        if max_cells < 1:
            self.pending = head
            return Step(tuple(emitted), (False,) * len(emitted), 0, 0, 0, (self.clock() - started) * 1000,
                        full=True)

        room = min(self.policy.k_max, max_cells - 1, max_emit - len(emitted)) if draft else 0
        guess = self.drafter.draft(room)
        drafts = self._chosen(guess.tokens, guess.agreement, len(self.drafter) - self._context)
        self._guess = guess if room > 0 and not drafts else None
        base = self.target.n_cached
        self.target.decode([head, *drafts])
        outcomes: list[bool] = []
        ended = False
        for row, proposed in enumerate(drafts):
            token = self.target.sample(row)
            outcomes.append(token == proposed)
            emitted.append(token)
            if self.is_end(token):
                ended = True
                break
            self.drafter.append(token)
            if token != proposed:
                self.pending = token
                break
        kept = 1 + sum(outcomes) - (ended and outcomes[-1])
        if kept < 1 + len(drafts):
            self.target.truncate(base + kept)
        self._row = len(drafts)  # all accepted: the last row predicts the next token
        ms = (self.clock() - started) * 1000
        self._account(guess.agreement, outcomes, 1 + len(drafts), kept, ms)
        from_draft = (False,) * (len(emitted) - len(outcomes)) + tuple(outcomes)
        return Step(tuple(emitted), from_draft, 1 + len(drafts), len(drafts), sum(outcomes), ms, ended=ended)

    def _chosen(self, tokens: Sequence[int], agreement: int, reply: int) -> Sequence[int]:
        """The drafts the policy verifies, never past the first end-of-generation token: a reply
        that takes it ends there, so drafts after it are verified for nothing. A reply quoting the
        end of the user's message drafts on into the template's closing tokens (`<|im_end|>`, a
        newline, `<|im_start|>assistant`): the paragraph copy's last step verified 31 drafts and
        could keep 8 (profiled: 23 tokens, about a tenth of that reply's decode time).

        The policy is asked first and only the drafts it took are scanned for an end; where one is
        found it is asked again with the drafts through that end. That is what asking with the
        guesses cut at their first end gives: the policy's choice from n drafts is also its choice
        from any m of them with that choice <= m <= n (the best batch among fewer sizes, when it
        is one of them, is still the best), and most steps of open chat take none, so their 48
        guesses are not scanned."""
        drafts = tokens[:self.policy.choose(agreement, len(tokens), reply)]
        for i, token in enumerate(drafts):
            if self.is_end(token):
                return tokens[:self.policy.choose(agreement, i + 1, reply)]
        return drafts

    def settle(self, max_cells: int) -> None:
        """Decode the pending token (a correction already emitted) into the cache, so that the
        cache holds every emitted token, as the plain loop leaves it after a turn; nothing when
        no token is pending or the cache is full (`max_cells` < 1)."""
        if self.pending is None or max_cells < 1:
            return
        started = self.clock()
        head, self.pending = self.pending, None
        self.target.decode([head])
        self._row = -1
        self._account(0, [], 1, 1, (self.clock() - started) * 1000)

    def _account(self, match: int, outcomes: list[bool], batch: int, kept: int, ms: float) -> None:
        self.policy.observe(match, outcomes)
        self.policy.record_step(batch, kept, ms)
        stats = self.stats
        stats.steps += 1
        stats.tokens += kept
        stats.decode_ms += ms
        t1 = self.policy.t1_ms  # a plain step has just been timed into it, when this was one
        stats.baseline_ms = None if stats.baseline_ms is None or t1 is None else stats.baseline_ms + kept * t1
        if outcomes:
            stats.count(outcomes)
