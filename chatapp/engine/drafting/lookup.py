"""Prompt-lookup drafting: guess the next tokens by finding where the text last said the same thing.

No second model: the drafter keeps the token ids of the context (prompt and reply so far) and,
for every n from `n_max` down to `n_min`, an index from each n-gram to where it last ended.
To draft, it looks up the last n tokens and proposes the tokens that followed their latest
earlier occurrence. Replies that quote, summarise with names or edit code copy long runs from
the context, and those runs are what the drafts catch.

The index is updated as tokens are appended (one dict write per n), so the cost of a step does
not grow with the context. Measured here (CPython 3.12, one core of a shared 2-core VM):
`append` and `draft(8)` ~1-2 µs each, the same at 100 and at 8,192 tokens of context; a
rebuild of 8,192 tokens (`follow` with a prompt that is not an extension) ~5-7 ms, once per turn
at most (benchmarks/speculative.py --drafter-cost measures it again). A decode step of the default
model takes milliseconds, so drafting costs < 0.1% of it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Draft:
    tokens: tuple[int, ...]
    """The proposed continuation, at most k tokens; empty when nothing matched."""
    match: int
    """How many trailing context tokens matched (0 when nothing did); longer matches guess better."""
    agreement: int = 0
    """How far back the context and the text before the earlier occurrence agree, `match` tokens
    at least, up to AGREEMENT_CAP: 30 tokens in agreement say the reply is copying verbatim, which
    an n-gram of 4 cannot tell from a common phrase. A copy that resumed after an edit counts
    what it agreed before the edit too (`NgramDrafter._across_edits`)."""


NO_DRAFT = Draft((), 0)
AGREEMENT_CAP = 64
COPY_AGREEMENT = 16
"""A draft whose context agrees for 16 tokens or more is following a copy (see `_across_edits`)."""
RESUME_WITHIN = 12
RESUME_WINDOW = 4
RESUME_AGREEMENT = 3
"""A copy that broke is resumed when, within 12 tokens of the break, the context's last 3 tokens
or more agree with the source again within 4 tokens of where the copy would have got to (an edit
that changed a word's length shifts it by a token or two)."""


class NgramDrafter:
    def __init__(self, tokens: Sequence[int] = (), *, n_max: int = 4, n_min: int = 1):
        if not 1 <= n_min <= n_max:
            raise ValueError(f"need 1 <= n_min <= n_max, got n_min={n_min}, n_max={n_max}")
        self.n_max, self.n_min = n_max, n_min
        self.tokens: list[int] = []
        # One index per n, longest first: n-gram -> the position just after its latest occurrence
        # that has a follower. The context's own last n-gram is never in it (no follower yet),
        # so a lookup finds an earlier occurrence.
        self._indexes: list[tuple[int, dict[tuple[int, ...], int]]] = [
            (n, {}) for n in range(n_max, n_min - 1, -1)]
        self._copied: tuple[int, int] | None = None  # (where it copied from, context length) of the last draft
        self._copy: tuple[int, int, int, int] | None = None
        """The copy being followed: where it copies from and the context length then, the agreement it
        carries from before its edits, and its unbroken agreement then."""
        self.extend(tokens)

    def __len__(self) -> int:
        return len(self.tokens)

    def append(self, token: int) -> None:
        tokens = self.tokens
        end = len(tokens)  # the new token's position: it follows the n-grams that end just before it
        tokens.append(token)
        for n, index in self._indexes:
            if end >= n:
                index[tuple(tokens[end - n:end])] = end

    def extend(self, tokens: Sequence[int]) -> None:
        for token in tokens:
            self.append(token)

    def follow(self, tokens: Sequence[int]) -> None:
        """Make the context equal `tokens`: appended when it extends the current context (the
        usual case from one turn to the next), rebuilt otherwise."""
        n = len(self.tokens)
        if len(tokens) >= n and list(tokens[:n]) == self.tokens:
            self.extend(tokens[n:])
            return
        self.tokens = []
        self._copied = None
        self._copy = None
        for _, index in self._indexes:
            index.clear()
        self.extend(tokens)

    def draft(self, k: int) -> Draft:
        """Up to k tokens that followed the latest earlier occurrence of the longest matching suffix,
        or, where the last draft's copy, moved on by the tokens since, agrees further back, that.

        A copy passes n-grams that occur again later in its source ("order", "\n        price ="):
        the latest occurrence is then a later line, and the draft from it is wrong from its first
        token. The copy the reply follows agrees back to where it began. Paired runs (6 rounds,
        `chatapp ask` alone): paragraph 1.225, rename 1.044, list 1.002, quote 0.986, config
        0.992 of the latest occurrence alone; on the rename reply, drafts of 32 right for 6,031
        tokens in all against 5,012.

        A continuation that runs into the context's end keeps copying from what it has proposed,
        so a repeating pattern ("a b a b a") drafts its period out to k tokens.
        """
        tokens = self.tokens
        size = len(tokens)
        if k <= 0:
            return NO_DRAFT
        for n, index in self._indexes:
            if size < n:
                continue
            start = index.get(tuple(tokens[size - n:]))
            if start is None:
                continue
            agreement = self._agreement(start)
            if self._copied is not None:
                source, then = self._copied
                moved = source + size - then  # where the last draft's copy has got to since
                if 0 < moved < size and moved != start:
                    reach = self._agreement(moved)
                    if reach > agreement:
                        start, agreement = moved, reach
            start, agreement = self._across_edits(start, agreement, size)
            self._copied = (start, size)
            out = tokens[start:start + k]  # a slice: the decode loop drafts k_max (48) on every step
            period = size - start
            while len(out) < k:
                out.append(out[len(out) - period])
            return Draft(tuple(out), n, agreement)
        return NO_DRAFT

    def _across_edits(self, start: int, agreement: int, size: int) -> tuple[int, int]:
        """The draft's start and agreement, counting the agreement a copy had before an edit it
        resumed after (up to AGREEMENT_CAP).

        A reply that copies with changes (a renamed variable, a changed value, a word the model
        put differently) breaks its copy for a few tokens and goes on copying where it left off.
        Counted from the break, its agreement starts again from nothing, and the policy bets
        little on it for a dozen tokens (AGREEMENT_REACH); the copy it resumed had agreed for
        dozens. Cold, fresh homes, 4 alternating rounds, with this against without: rename 1.043,
        list 1.031, quote 1.036 (38 steps against 44-47), paragraph 1.000, config 0.987, chat
        1.025, where the same variant against itself ran 0.98-1.03."""
        followed = self._copy
        if followed is not None:
            source, then, carried, run = followed
            since = size - then
            moved = source + since  # where the copy would be had nothing changed
            if since == 0:  # drafted again without a token since: the same answer
                return source, min(AGREEMENT_CAP, run + carried)
            if 0 < since <= RESUME_WITHIN and moved < size:
                # Unbroken: the copy agrees all the way back, whichever place the lookup found (a
                # later occurrence of the last n-gram can agree as far since an edit).
                unbroken = agreement if start == moved else self._agreement(moved)
                if unbroken >= min(AGREEMENT_CAP, run + since):
                    self._copy = (moved, size, carried, unbroken)
                    return moved, min(AGREEMENT_CAP, unbroken + carried)
                resumed, longest = None, max(RESUME_AGREEMENT, agreement) - 1
                for place in range(max(1, moved - RESUME_WINDOW), min(size - 1, moved + RESUME_WINDOW) + 1):
                    agreed = self._agreement(place)
                    if longest < agreed < since:  # agreeing again since the break, not across it
                        resumed, longest = place, agreed
                if resumed is not None:
                    carried = min(AGREEMENT_CAP, carried + run)
                    self._copy = (resumed, size, carried, longest)
                    return resumed, min(AGREEMENT_CAP, longest + carried)
                return start, agreement  # still inside the edit
            self._copy = None
        if agreement >= COPY_AGREEMENT:
            self._copy = (start, size, 0, agreement)
        return start, agreement

    def _agreement(self, start: int) -> int:
        """How many tokens before `start` equal the context's last ones, up to AGREEMENT_CAP."""
        tokens, size = self.tokens, len(self.tokens)
        agreement = 0
        while (agreement < AGREEMENT_CAP and agreement < start
               and tokens[start - agreement - 1] == tokens[size - agreement - 1]):
            agreement += 1
        return agreement
