"""Prefill while typing: the next prompt goes into the KV cache while its question is typed.

A question sits in the composer, already tokenized, for as long as it takes to type; without
this its whole prompt is prefilled only after Enter. Here the engine fills the cache ahead
with what the next turn's prompt will certainly start with:
- the conversation as the next turn renders it, and the template's opening of the user message;
- the typed text's token-stable prefix: the tokens that stay the same whatever is typed next.
  The text is tokenized as it stands and with a letter and with a space and a letter after it;
  what all three share, less HOLD_BACK tokens more, is kept (a word still growing may merge
  with what follows, and some tokenizers join punctuation across a space).
- then a guess that the text is finished: the rest of the prompt as it would be sent now (the
  end of the text, the template's close and generation prompt). Enter on that text finds the
  whole prompt cached and the first token's logits waiting (a local backend keeps the row:
  `LlamaRuntime.logits_ready`), so nothing is left to prefill; the next keystroke cuts the
  guess back like any edit. Measured in the TUI (benchmarks/typing_prefill.py): the 14 tokens
  that the stable prefix left took 140-160 ms after Enter, where the UI's own work at Enter
  shares the two cores, and the time to the first token fell from 0.32x to 0.22x of typing off.
On Enter the turn's own prefix reuse (`Backend.stream`) finds it in the cache, so only what the
text changed since is prefilled.

What it never does is change a reply. It writes only a prefix of the prompt the turn would
prefill anyway, and each row as the turn would have computed it. llama.cpp's matrix products
work row by row, but its CPU flash attention computes a batch of TILE_ROWS or more another way
than a smaller one (chatapp.engine.backend), so a turn prefills in a fixed split
(`prefill_batches`): from where it starts, whole TILE_ROWS up to `tiled_end`, at least
TAIL_MARGIN tokens before the prompt's end, in large batches; the rest in small ones. Typing
keeps to the same split for the prompt as it would be sent now: large batches from where a turn
without typing would start (`typed_from`) up to `tiled_end`, then small ones. When the text
grows past the next boundary, the small batches' rows are computed again in a large one. At
Enter, `reuse_limit` keeps what agrees with the split for the prompt sent. The tests compare
greedy replies with it on and off.

It gives way at once to everything else: an in-process backend stops while other programs keep
every core busy (the note then says so, and Enter prefills the rest); each batch is short
(BATCH tokens) and a stop event cuts one mid-way; a turn, a session or a model switch takes the
engine's turn lock from it (the UI's EngineGate). It skips what would be thrown away: a
question too long for the context (the turn would drop old turns first), and the question's
text when files are attached (the attachment text placed before the question depends on the
whole question).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from chatapp.engine.backend import SMALL_MIN, TILE_ROWS, Backend, tiled_end
from chatapp.engine.events import Message
from chatapp.engine.tokens import common_prefix

HOLD_BACK = 1
"""Tokens kept back from the end of what the probes share: cheap insurance against a
tokenizer whose merges reach further than one letter."""

GAVE_WAY = "held back: other programs keep every core busy (Enter prefills the rest)"
"""The note when the backend stopped short without being told to (`Backend.prefill`)."""

PROBES = ("a", " a")
"""Text that may follow what is typed: a word going on, and a new word."""


@dataclass(frozen=True)
class TypeAhead:
    """Where prefill while typing stands, after each batch (and once when it has nothing to do)."""

    ready: int
    """Tokens of the next prompt, as typed so far, now in the cache."""
    total: int
    """Tokens of the next prompt as typed so far, to the end of the generation prompt."""
    prefilled: int
    """Of `ready`, those prefilled while typing (the rest were cached from the turns before)."""
    note: str = ""
    """Why less is prefilled than could be, in a few words ("" when nothing held it back)."""


class TypeAheadState:
    """What the engine remembers between typing batches and the next turn: where the rows typing
    computed start, and where its large batches end."""

    def __init__(self) -> None:
        self.typed_from: int | None = None
        """The first cache position typing filled since the cache last changed otherwise: where
        a turn without typing would start prefilling."""
        self.large_end = 0
        """Typing's large batches fill typed_from..large_end (a whole number of TILE_ROWS); its
        small ones the rest."""

    def forget(self) -> None:
        """The cache was replaced or cleared: nothing in it came from typing."""
        self.typed_from = None

    def prefilled(self, cached: int) -> int:
        """How many of the first `cached` cache positions typing filled."""
        return 0 if self.typed_from is None else max(0, cached - self.typed_from)

    def _valid(self, origin: int, shared: int, end: int) -> int:
        """How much of the cache, sharing `shared` tokens with a prompt of `end` tokens, agrees
        with the split of a prefill from `origin` (typing's large batches end at large_end)."""
        tiled = tiled_end(origin, end)
        large = min(self.large_end, shared)
        if large < tiled:  # the rows after it were computed in small batches, and must not be
            return origin + TILE_ROWS * ((large - origin) // TILE_ROWS)
        if self.large_end > tiled:  # the text got shorter: these rows belong to small batches
            return tiled
        return shared

    def reuse_limit(self, cached: Sequence[int], prompt: Sequence[int]) -> int | None:
        """How much of the cache a turn on `prompt` may reuse so that every row it prefills, and
        every row typing computed, comes out as in a turn without typing (`prefill_batches` from
        where that turn would start); None when typing filled nothing."""
        if self.typed_from is None:
            return None
        shared = common_prefix(cached, prompt)
        if shared <= self.typed_from:
            return None
        return self._valid(self.typed_from, shared, len(prompt))

    def run(self, backend: Backend, prompt_for: Callable[[str], list[int]], text: str, *, fits: Callable[[int], bool],
            question_stable: bool, stop: threading.Event) -> Iterator[TypeAhead]:
        """Make the cache hold the stable prefix of the next prompt for `text` (the composer's),
        in batches, until it does or `stop` is set. `prompt_for(text)` is the whole next
        prompt with `text` as the question; `fits(n)` says whether a prompt of n tokens goes
        in without dropping turns; `question_stable` is False when the question's text
        decides more than itself (attachments): then only what comes before it is prefilled."""
        full = prompt_for(text)
        note = ""
        if not fits(len(full)):
            yield self._state(backend, full, "the question will not fit without dropping turns")
            return
        if question_stable:
            stable = self.stable_prefix(full, [prompt_for(text + probe) for probe in PROBES])
        else:
            stable = self.stable_prefix(full, [prompt_for(""), prompt_for("a")])
            note = "the question itself waits for Enter (attachments)"
        if stop.is_set():
            return
        keep = common_prefix(backend.cached_tokens(), stable)
        if self.typed_from is not None and keep <= self.typed_from:
            self.typed_from = None  # an edit went back past everything typing computed
        origin = keep if self.typed_from is None else self.typed_from
        valid = keep if self.typed_from is None else self._valid(origin, keep, len(full))
        tiled = tiled_end(origin, len(full))
        large = min(tiled, origin + TILE_ROWS * ((len(stable) - origin) // TILE_ROWS))
        self.large_end = min(self.large_end, valid)
        plan = [(stable[:valid], 1)]  # first cut back to what agrees with the split
        if text.strip():
            if large - valid >= TILE_ROWS:
                plan.append((stable[:large], TILE_ROWS))
            held = max(valid, large)
            if large == tiled and len(stable) - held >= SMALL_MIN:
                plan.append((stable, TILE_ROWS - 1))
                held = len(stable)
            if large == tiled and question_stable:
                # A guess that the text is finished: the rest of the prompt as it would be sent
                # now, in a small batch as a turn computes a prompt's end (at least SMALL_MIN
                # tokens, so never the decode path). Enter on this text then finds the whole
                # prompt cached and the first token's logits waiting; the next keystroke cuts
                # the guess back to what still holds.
                plan.append((full[:min(held, len(full) - SMALL_MIN)], 1))
                plan.append((full, TILE_ROWS - 1))
        for tokens, batch in plan:
            if len(tokens) > valid and self.typed_from is None:
                self.typed_from, self.large_end = origin, origin
            for ready in backend.prefill(tokens, stop, batch=batch):
                if batch == TILE_ROWS:
                    self.large_end = ready
                yield TypeAhead(ready, len(full), self.prefilled(ready), note)
            if stop.is_set():
                break
            if len(backend.cached_tokens()) < len(tokens):  # the backend gave way to a busy machine
                note = GAVE_WAY
                break
            valid = len(tokens)
        yield self._state(backend, full, note)

    @staticmethod
    def stable_prefix(full: Sequence[int], probes: Sequence[Sequence[int]]) -> list[int]:
        """What `full` shares with every probe, less HOLD_BACK tokens."""
        shared = min((common_prefix(full, probe) for probe in probes), default=len(full))
        return list(full[:max(0, shared - HOLD_BACK)])

    def _state(self, backend: Backend, full: list[int], note: str) -> TypeAhead:
        ready = common_prefix(backend.cached_tokens(), full)
        return TypeAhead(ready, len(full), self.prefilled(ready), note)


def next_question(messages: Sequence[Message], text: str) -> list[Message]:
    """The conversation the next turn renders, with `text` as its question."""
    return [*messages, Message("user", text)]
