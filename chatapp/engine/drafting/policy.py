"""How many draft tokens to verify at each decode step, from this machine's measured costs.

A speculative step decodes the next token plus k drafts in one llama_decode of m = k + 1
tokens, and the cache advances by 1 plus the drafts accepted before the first rejection. If a
draft is accepted with probability a (given the one before it was), the expected advance is
1 + a + ... + a^k, so drafting k pays when

    (1 + a + ... + a^k) * t(1) / t(k + 1) > 1,

with t(m) the wall time of a step of m tokens. Both sides are measured, not assumed: t(1) from
plain steps, t(m) from verify steps (as a ratio to t(1), so a cache that grows during a reply,
which slows every step alike, does not date them), seeded with the batch times the exactness
check took for every size it decoded (chatapp.engine.local.exact_batches), and a from how drafts
fared, kept per match length (a 4-token match guesses better than a 1-token one). The seeds
matter: on two CPU cores the default model's batch of 2 costs 1.7 steps, of 9 six, of 17 ten,
so a straight line through the first sizes tried would never try the long drafts that pay.
Each figure is an exponentially weighted mean, so a reply that starts or stops copying moves
them within a few steps.

Backing off is cheap: the decoder compares the drafter's guess with the token it samples on
every plain step ("shadow" checks), which costs a dict lookup and no decode, so acceptance is
always measured and drafting comes back as soon as the reply copies. What is left is the risk
of a wrong cost estimate: the time lost by verify steps (their time minus what plain steps would
have taken for the tokens they gave) is tallied with a decay, and while it exceeds `budget` of
the decode time drafting stays off. That keeps speculation's worst case near `budget` (1%) of
decode speed, under the 2% that open chat may lose (issue 24: drafting >= 0.98x plain decoding
there), leaving the drafting loop's own cost room.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from chatapp.config import MAX_DRAFT_TOKENS

VERBATIM_MATCH = 32
VERBATIM_ACCEPTANCE = 0.9
"""A draft whose context agrees for 32 tokens or more back, in a bucket whose drafts were taken
90% of the time or more, is a verbatim copy: see choose. From 16 on, a reply that restated its
own sentences (a config task: "The `-o` option ...", "The `-u` option ...") was taken for one,
and its batches of 32 kept 6 to 11 of their drafts."""
CONFIDENT_MATCH = 8
"""From 8 tokens of agreement, in a bucket taken 90% of the time or more, the budget does not stop
drafting (the expected advance still sizes the batch): after one early miss, it held a reply
copying a function in plain steps through 23 tokens whose drafts were right 96-99% of the time."""
BUCKETS = frozenset({1, 2, 3, 4, 8, 16, 32})
"""Every value of `DraftPolicy.bucket`: the match lengths acceptance is kept by."""
RESTORED_ACCEPTANCE = 0.95
"""The most a bucket's acceptance read from an earlier process may say: what earlier replies
copied does not make a new reply certain to. A rename task after a paragraph copy started with
its 16-31 bucket at 1.0, verified 31 drafts at its first long agreement and kept none; paired
runs with the cap (6 rounds): rename 1.048, quote 1.020, list 1.075, paragraph 0.999, chat 0.999
of the uncapped policy, config 0.941 (it drafted less there)."""
AGREEMENT_REACH = 1.5
"""After a break in the reply's copy, drafts reach at most 1.5 times the tokens the copy has agreed
for since (2 at least): a copy that has run for 4 tokens is not yet worth betting 31 on, whatever a
bucket's running acceptance says. The figure near 1 that a bucket's mean reaches from a few
accepted drafts sized batches of 32 at 3 to 9 tokens of agreement, and they kept 1 to 4 (a rename
and a quote, each after its copy broke). Paired runs (6 rounds, `chatapp ask` alone, own cache
each), capped against not: rename 1.105, quote 1.065, config 1.026, list 1.023, paragraph 0.990
(same steps). A reply that has copied from its first token is not capped: there the reply's start,
not a difference, cuts its agreement short (capped too, a paragraph copy took 8 steps instead of
6, 0.868x in paired runs)."""
QUOTE_MATCH = 24
"""A reply that has agreed with one place of the context from its first token for 24 tokens is
quoting it, and verifies the longest checked batch whatever the buckets say: a bucket's figure
mixes every reply's copies, and after open chat (replies that repeat a phrase of their own and
leave it) the 16-31 bucket read 0.48, so a paragraph copy 25 tokens in took a plain step and two
batches of 3 before drafting 31 (9-10 steps where 6 do). Traced after a chat prompt, three
paragraph runs in a row: 7, 6, 6 steps (237, 235, 231 tok/s) against 10, 9, 6 (203, 215, 223)
without the rule. Not from 16: a small model restating the request ("Rename the variable
`subtotal` to `net_amount` in the function") agreed with it for 16 tokens and broke there, and
the batch of 33 bet on it kept nothing (cold, fresh homes, 4 alternating rounds: 24 against 16,
rename 1.060, paragraph 1.062). llama.cpp's ngram-mod also waits for 24 tokens of agreement
before it drafts (its n_match), then drafts 48 to 64."""
QUOTE_START = 8
QUOTE_START_ACCEPTANCE = 0.97
"""A reply that has agreed with one place of the context from its first token for 8 tokens, not
yet QUOTE_MATCH, has its drafts sized as if 97% of them were taken, at least. Its buckets were
learned over these same few tokens from PRIOR_ACCEPTANCE (0.87-0.92 after 8-10 right guesses),
and at that the expected advance chose plain steps and then a batch of 5 and one of 16 before a
paragraph copy reached 24 tokens (13 steps for 102 tokens, where llama-server's ngram-simple
takes 12). A small model restating the request instead ("Rename the variable `subtotal` to
`net_amount` in the function") broke 8 tokens later and lost the rest of a batch of 16.
Replayed without timing noise (benchmarks/draft_replay.py, 12 repeats): paragraph 1.050 (9
steps), rename 1.113, quote, config, list and open chat the same steps. Cold, fresh homes, 5
alternating rounds, with against without: paragraph 1.093 (every round 1.05-1.12), rename 1.008,
quote 1.025, config 1.008 (list 1.078, its steps unchanged: the machine's spread)."""
COPY_DRAFTS = 32
"""Only a reply quoting the context from its first token (QUOTE_MATCH) verifies more than 32 drafts
a step (up to draft_max). Elsewhere copies break every 30-40 tokens (a renamed variable, a changed
value, the model's own variation on a sentence) and a longer bet loses more at each break than it
gains between them. Replayed (benchmarks/draft_replay.py, one timed cost table, 12 repeats),
against 48 for every bet: cold paragraph 1.000, rename 1.006, quote 1.020, config 1.013, list
1.006; warm (`--warm`) 1.008, 0.974, 1.061, 0.985, 1.010."""
PLAIN_KEPT = 5
"""Plain steps whose median is t1."""
PRIOR_ACCEPTANCE = 0.4
PRIOR_EXPONENT = 0.8
"""Before a size is timed: t(m) = t(1) * m ** 0.8, and past the largest size timed, its cost
grown by that power. On a CPU a batch's cost grows as a power of its size: the default model's
exactness check on two cores timed 1.81 for 2 tokens, 6.29 for 9, 15.8 for 32, 16.3 for 33
(m ** 0.8: 1.74, 5.80, 16.0, 16.4). A fresh home's first process has no check to seed from
(issue 36): with the straight line that ran through the first size timed (a batch of 3 at 2.95
steps), 33 tokens looked to cost 32 steps and no long batch was ever tried. Where batches cost
less (a GPU), the line through the measured sizes is the lower and is taken: it leans hopeful,
and the first verify steps replace either guess."""


@dataclass
class DraftPolicy:
    k_max: int = 8
    budget: float = 0.01
    """The share of decode time that wrong guesses about costs may lose before drafting stops. At 2%
    a chat reply that repeats little (the third chat prompt) verified 13 batches of 3 and kept 6 of
    their 26 drafts, 0.976x of plain decoding; paired runs at 1% against 2% (6 rounds): that prompt
    1.007, the first 1.003, config and rename the same steps (0.973 and 0.983 by time)."""
    margin: float = 0.15
    """Draft only when the expected speed-up is at least this much. The expected advance trusts a
    bucket's acceptance for every draft of the batch, and shadow checks measure only the first;
    and a batch also costs the plain step after it a graph rebuild (1-2 ms here). In open chat the
    batches of 3 that short matches (2-5 tokens) chose at a predicted 6-12% cost more than they
    gave: paired in one process (6-8 alternating rounds), drafting at 3% against never drafting
    ran 0.964 on the third chat prompt and 0.968 on the first; at 15%, 0.989 and 1.004 (the second,
    which copies, 1.096). Against 3% on the copy tasks: paragraph 1.017, list 1.013, rename 0.996,
    quote 0.990, config 0.970 (it verified fewer batches of 3; 163-166 steps against 155-158)."""
    smoothing: float = 0.2
    """Weight of the newest observation in each running mean (for acceptance, of each draft checked)."""
    decay: float = 0.99
    """Per step, for the tally of time lost: about the last hundred steps count."""
    t1_ms: float | None = None
    """Wall time of a plain (one-token) step."""
    ratios: dict[int, float] = field(default_factory=dict)
    """t(m) / t(1) per batch size m, where measured."""
    acceptance: dict[int, float] = field(default_factory=dict)
    """Per match length (bucketed, see `bucket`): the chance a draft token is accepted, given the
    one before it was."""
    sizes: frozenset[int] | None = None
    """The batch sizes (drafts + 1) a step may verify at: those the exactness check decoded and
    found exact (chatapp.engine.local.exact_batches); None: any size up to k_max + 1."""
    lost_ms: float = 0.0
    spent_ms: float = 0.0
    _plain: list[float] = field(default_factory=list, repr=False, compare=False)
    _table: list[float] = field(default_factory=list, repr=False, compare=False)
    _table_key: tuple | None = field(default=None, repr=False, compare=False)

    # --- what is known -------------------------------------------------------------------
    def ratio(self, m: int) -> float:
        """t(m) / t(1): measured, else read off the line through the nearest measured sizes
        around m (size 1 costs 1), else extended from the largest by PRIOR_EXPONENT's power or
        the two largest's slope, whichever is lower. Per-token costs on a CPU fall as batches grow, in
        steps no single straight line fits, so the nearest measurements are the best guide."""
        if m <= 1:
            return 1.0
        if m in self.ratios:
            return self.ratios[m]
        points = [(1, 1.0), *sorted((size, r) for size, r in self.ratios.items() if size > 1)]
        below = max((p for p in points if p[0] < m), key=lambda p: p[0])
        above = [p for p in points if p[0] > m]
        if above:
            (x0, y0), (x1, y1) = below, min(above, key=lambda p: p[0])
            return y0 + max((y1 - y0) / (x1 - x0), 0.0) * (m - x0)
        (x0, y0), (x1, y1) = points[-2] if len(points) >= 2 else (0, 0.0), points[-1]
        powered = y1 * (m / x1) ** PRIOR_EXPONENT
        return min(powered, y1 + max((y1 - y0) / (x1 - x0), 0.0) * (m - x1)) if len(points) >= 2 else powered

    def seed(self, ratios: dict[int, float]) -> None:
        """Start from batch costs measured elsewhere (the exactness check times every size it
        decodes); sizes already measured by this policy's own steps keep their figures.

        A seed never costs more a token than a smaller seed: the check times each size a few
        times, once, and a burst of other load then can make a size look dear that this CPU runs
        cheaper a token than smaller ones (seen here: 12 tokens at 14 steps beside 9 at 4.5),
        and a size that looks dear is never tried, so its own timing would never correct it."""
        cheapest = None  # the lowest cost a token among the smaller seeds
        for m, r in sorted(ratios.items()):
            if m <= 1 or r <= 0:
                continue
            r = max(r, 1.0)
            if cheapest is not None:
                r = min(r, cheapest * m)
            kept = self.ratios.setdefault(m, r)
            cheapest = kept / m if cheapest is None else min(cheapest, kept / m)

    def learned(self) -> dict:
        """What this policy measured that holds beyond one process: batch costs and acceptance
        by match length (machine and model calibration, no text), for `restore` in the next."""
        return {"ratios": {str(m): round(r, 4) for m, r in self.ratios.items()},
                "acceptance": {str(b): round(a, 4) for b, a in self.acceptance.items()}}

    def restore(self, learned: object) -> None:
        """Start from what an earlier process `learned()`; anything malformed is ignored."""
        if not isinstance(learned, dict):
            return
        try:
            ratios = {int(m): float(r) for m, r in dict(learned.get("ratios", {})).items()}
            acceptance = {int(b): float(a) for b, a in dict(learned.get("acceptance", {})).items()}
        except (TypeError, ValueError):
            return
        # Only figures `learned()` can have written: a batch size a step may verify, a match
        # length's bucket. An edited file's 20,000 other keys cost 4 ms in every decode step.
        self.ratios.update({m: r for m, r in ratios.items() if 1 < m <= MAX_DRAFT_TOKENS + 1 and 1.0 <= r < 1e4})
        self.acceptance.update({b: min(a, RESTORED_ACCEPTANCE) for b, a in acceptance.items()
                                if b in BUCKETS and 0.0 <= a <= 1.0})

    @staticmethod
    def bucket(match: int) -> int:
        """Match lengths that guess alike share a figure: 1, 2, 3, then 4-7, 8-15, 16-31, 32+. A
        reply copying verbatim agrees with the context for dozens of tokens and its drafts are
        nearly always right; a 4-token phrase that recurs is right far less often."""
        if match < 4:
            return match
        return min(1 << (match.bit_length() - 1), 32)

    def accept_rate(self, match: int) -> float:
        """The bucket's own figure; for a bucket not seen yet, the best of the prior and the
        figures of the shorter matches below it: a copy guesses at least as well when it agrees
        further back. Without that, a reply copying verbatim re-learned every bucket from the
        prior as its agreement grew (4, 8, 16, 32 tokens), and a fresh process decoded ~17 plain
        steps before its first long draft (profiled on the paragraph copy)."""
        bucket = self.bucket(match)
        found = self.acceptance.get(bucket)
        if found is not None:
            return found
        below = [a for b, a in self.acceptance.items() if b < bucket]
        return max([PRIOR_ACCEPTANCE, *below])

    # --- the decision --------------------------------------------------------------------
    def choose(self, match: int, available: int, reply: int | None = None) -> int:
        """How many of the `available` draft tokens (from a `match`-token match) to verify now.

        `reply`: the tokens the reply has so far; when the agreement is shorter, the copy broke or
        began within the reply, and the batch is held to AGREEMENT_REACH times the agreement
        (None: not known, not held); when it is as long, from QUOTE_MATCH on, the reply is quoting,
        and only then may the batch pass COPY_DRAFTS.

        Runs on every decode step, so it stays cheap (a few µs): the batch costs are tabled once
        per change, and a step whose acceptance could not pay for the cheapest batch even if every
        draft were taken stops at once (the typical free-chat step)."""
        if self.t1_ms is None or available <= 0 or match <= 0:
            return 0
        # A reply's first token often misses the same word inside the prompt by its leading
        # space ("exactly: The" against "The"): agreeing with all but its first token is still
        # quoting from the start.
        from_start = reply is not None and match + 1 >= reply
        quoting = from_start and match >= QUOTE_MATCH
        if reply is not None and not from_start:
            available = min(available, max(2, int(AGREEMENT_REACH * match)))
        if not quoting:
            available = min(available, COPY_DRAFTS)
        a = min(self.accept_rate(match), 0.999)
        if from_start and match >= QUOTE_START:
            a = max(a, QUOTE_START_ACCEPTANCE)
        costs = self._costs()
        longest = self._longest(min(available, self.k_max))
        if ((quoting or (match >= VERBATIM_MATCH and a >= VERBATIM_ACCEPTANCE)) and longest
                and costs[longest] < (longest + 1) / (1.0 + self.margin)):
            # Quoting, or copying verbatim: the longest checked batch. Per token a batch costs less the longer
            # it is on a CPU (see _costs), and a bucket's acceptance, a running mean, swings with
            # each rejection: sized by the expected advance alone (acceptance learned over twenty
            # tokens), a quote was copied mostly in batches of 4 (48-55 steps for 256 tokens,
            # against 25-41 this way). llama.cpp's own n-gram drafters follow the same rule (48
            # to 64 tokens after a 12- or 24-token match). Only where that batch costs less than
            # its tokens' single steps, as measured. The budget below does not stop it: in a
            # fresh process the first guesses' losses, with nothing yet spent to weigh them
            # against, held the budget over its line for the rest of a reply (a list task: 154
            # of 187 steps stopped by it, the copied rows among them).
            return longest
        confident = match >= CONFIDENT_MATCH and a >= VERBATIM_ACCEPTANCE
        if self.lost_ms > self.budget * self.spent_ms and not confident:
            return 0
        if 1.0 / (1.0 - a) < (1.0 + self.margin) * costs[0]:
            return 0
        best_k, best = 0, 1.0 + self.margin
        advance, gain = 1.0, 1.0  # expected advance with k drafts: 1 + a + ... + a^k
        sizes = self.sizes
        for k in range(1, min(available, self.k_max) + 1):
            gain *= a
            advance += gain
            if sizes is not None and k + 1 not in sizes:
                continue
            speedup = advance / costs[k]
            if speedup > best:
                best_k, best = k, speedup
        return best_k

    def _longest(self, k: int) -> int:
        """The most drafts, at most k, whose batch is a checked size."""
        while k > 0 and self.sizes is not None and k + 1 not in self.sizes:
            k -= 1
        return k

    def _costs(self) -> list[float]:
        """[the cheapest t(m)/t(1) for m >= 2, then t(2)/t(1) .. t(k_max + 1)/t(1)]; index k is
        the cost of k drafts.

        The table is made to hold what a batch's cost does on every machine measured: a larger
        batch never costs less than a smaller one, nor more a token (the default model on two
        cores, benchmarks/spec_profile.py --sweep: 7.8 ms a token at 2, 4.7-5.0 at 8, 4.3-4.6 at
        16, 4.1-4.3 at 32, flat from there to 96).
        Single timings break both under a burst of other load, and a size that looked dear was
        never tried again, so its figure never mended: a batch of 4 was once chosen on every
        step of a verbatim copy. Held to that shape, acceptance near 1 picks the longest batch
        and a copy that may break picks the size whose expected advance pays best."""
        # The ratios are compared as a dict, not sorted into the key: choose() runs on every
        # decode step, and sorting 49 sizes took most of its time (3.0 µs a call against 1.1).
        key = (self.k_max, self.sizes, self.ratios)
        if self._table_key != key:
            table, dearest, per_token = [], 1.0, 1.0
            for m in range(2, self.k_max + 2):
                r = min(max(self.ratio(m), dearest), per_token * m)
                table.append(r)
                dearest, per_token = r, min(per_token, r / m)
            allowed = [c for k, c in enumerate(table, 1) if self.sizes is None or k + 1 in self.sizes]
            self._table = [min(allowed, default=float("inf")), *table]
            self._table_key = (self.k_max, self.sizes, dict(self.ratios))  # a copy: the ratios change in place
        return self._table

    # --- what happened -------------------------------------------------------------------
    def observe(self, match: int, outcomes: list[bool]) -> None:
        """Draft tokens checked in order: accepted ones, then at most one rejection.

        The step's checks move the bucket's running mean together, by their share accepted, with
        the weight that as many checks one after the other would have had: a single check (a
        plain step's shadow check) moves it by `smoothing`. Folded in one by one instead, the
        rejection that ends a batch came last and weighed most: a copy whose batch of 32 kept 31
        read 0.8 after it (not 0.97), and its next steps drafted nothing (the rename task: 3
        plain steps in the middle of a copy, cold). Fresh homes, 4 alternating rounds, one by
        one against together: rename 0.978, quote 0.990, list 0.985, config 0.957, paragraph
        1.001."""
        if match <= 0 or not outcomes:
            return
        a = self.accept_rate(match)
        weight = 1.0 - (1.0 - self.smoothing) ** len(outcomes)
        self.acceptance[self.bucket(match)] = a + weight * (sum(outcomes) / len(outcomes) - a)

    def record_step(self, m: int, advanced: int, ms: float) -> None:
        """A step decoded m tokens in `ms` of wall time and the cache kept `advanced` of them."""
        if m == 1:
            # The median of the last few plain steps: once a reply drafts on every step no plain
            # step corrects t1, and one slow step (a first step after the prefill, a burst of
            # other load) as the mean's first figure made every batch look cheaper than one step
            # (profiled: a batch of 4 at 0.15 steps, chosen on every step of a verbatim copy).
            self._plain.append(ms)
            del self._plain[:-PLAIN_KEPT]
            self.t1_ms = sorted(self._plain)[len(self._plain) // 2]
        elif self.t1_ms:
            ratio = max(ms / self.t1_ms, 1.0)  # a batch of 2 or more never costs less than one step
            old = self.ratios.get(m)
            self.ratios[m] = ratio if old is None else old + self.smoothing * (ratio - old)
        self.spent_ms = self.spent_ms * self.decay + ms
        lost = ms - advanced * self.t1_ms if m > 1 and self.t1_ms else 0.0
        self.lost_ms = self.lost_ms * self.decay + lost
