"""The in-process backend's drafting: what was asked for, whether it can run here, and the
drafter and policy it keeps from turn to turn.

Drafting runs only where a verify batch gives exactly what single steps give, so that replies
do not change: flash attention must be on (without it llama.cpp's CPU attention gives a batch's
rows other logits), the cache must be able to drop rejected drafts (not a recurrent model), and
llama.cpp's kernels must give a batch's rows single steps' logits bit for bit on this model and
machine and decode thread count, which chatapp.engine.local.exact_batches checks once per count.
The check takes seconds, so it never runs before a first token: it runs right after the first
turn on a count with no verdict, on the turn's thread, and is kept on disk for every later
process. That first turn drafts on a prior where llama.cpp's kernels give the answer by their
structure (`exact_batches.prior_exact`: a quantized KV cache with flash attention on the CPU,
and no weights of a type the CPU backend repacks for batched products); elsewhere it decodes
plainly. Without the prior a fresh home's first process drafted nothing (issue 36: 0.60-0.97x
of plain decoding where the third process ran 1.57-1.64x). Where batches differ at any size checked, no step on that
thread count drafts: where they differ moves with the text (see exact_batches), so no smaller
size can be trusted either. A step on a count not yet checked (the thread policy backed off
mid-turn) decodes plainly.

With an f16 cache on the CPU, llama.cpp's single steps past 256 cells split the attention over
the threads and batches do not (exact_batches), so on two or more threads nothing would draft.
A backend loaded for drafting therefore takes a q8_0 cache instead (`kv_for_drafting`), which is
exact at every fill and thread count found, and says so in every drafted turn's record.
"""

from __future__ import annotations

from collections.abc import Callable

from chatapp.config import DraftMode, Settings
from chatapp.engine.backend import Drafting
from chatapp.engine.drafting.policy import DraftPolicy
from chatapp.engine.local.exact_batches import (BatchCheck, batch_check, cached_check, check_sizes, prior_exact,
                                                put_settings_entry, settings_entry)
from chatapp.engine.local.llama import LlamaRuntime, Sampler, VerifyTarget, can_remove_cells
from chatapp.engine.drafting.lookup import NgramDrafter
from chatapp.engine.drafting.speculative import SpeculativeDecoder

DRAFTING_KV_TYPE = "q8_0"
POLICY_CACHE = "draft_policy_1"
"""The draft policy's batch costs and acceptance by match length, per model and settings_key:
a fresh process started cold re-learned them for most of a reply (a list task: 169 steps cold,
55-63 once learned, 131 against 154-162 tok/s)."""
ON_PRIOR = "prior (checking after this turn)"
"""The record's draft_check for a turn drafted on `prior_exact` before the check ran."""
CHECK_PENDING = ("not yet checked on this model, build, KV type and thread count that drafts keep replies the "
                 "same; checking after this turn (once: the verdict is kept on disk)")


def kv_for_drafting(settings: Settings, on_gpu: bool) -> tuple[str, str]:
    """The KV type to load and, when it is not the one asked for, why (one line for the record
    and the Speed panel). Only an f16 cache on the CPU with drafting asked for is changed."""
    if settings.draft == "off" or settings.kv_type != "f16" or on_gpu or settings.flash_attn == "off":
        return settings.kv_type, ""
    return DRAFTING_KV_TYPE, (f"KV cache {DRAFTING_KV_TYPE} instead of f16, so verify batches are exact (f16 single "
                              "steps past 256 cells split attention over threads)")


class LocalDrafting:
    def __init__(self, runtime: LlamaRuntime, policy: DraftPolicy | None = None,
                 threads: Callable[[], int] | None = None, chosen: str = "") -> None:
        """`threads`: the decode thread count a step would run on now (the backend's policy).
        `chosen`: what was changed at load so that drafts stay exact (see kv_for_drafting)."""
        self.runtime = runtime
        self.state = Drafting("off", Settings().draft_max)
        self.chosen = chosen
        # One drafter and one policy for the backend's life: the step costs and acceptance they
        # measure carry from turn to turn, and the drafter's index grows with the cache.
        self.drafter = NgramDrafter()
        self.policy = policy or DraftPolicy()
        self._threads = threads or (lambda: runtime.threads[0])
        self._checks: dict[int, BatchCheck] = {}
        """The batch checks by decode thread count (exactness can change with it)."""
        self._sources: dict[int, str] = {}
        """Where each count's check came from: "cache" (an earlier process) or "run" (this one)."""
        self._pending: int | None = None
        """The thread count whose check runs after the current turn."""
        self._unchecked: set[int] = set()
        """Counts a step of the current turn ran on with no check covering it: automatic threads
        follow the load, so a turn may move to a count it did not start on. Each is checked after
        the turn too; without that, a count first met mid-turn never drafted in any later turn."""
        self._restored: set[int] = set()
        """Thread counts whose policy figures were read from disk (once each)."""
        self._prior: str | None = None
        """Why drafts are exact before any check (see prior_exact; "" when nothing says so), read once."""

    @property
    def _check(self) -> BatchCheck | None:
        """The check for the thread count a step would run on now, if one was made."""
        n = self._threads()
        if n not in self._checks and (found := cached_check(self.runtime, n)) is not None:
            self._checks[n], self._sources[n] = found, "cache"
        return self._checks.get(n)

    @_check.setter
    def _check(self, check: BatchCheck) -> None:
        self._checks[self._threads()] = check

    def exact_at(self, threads: int) -> bool:
        """Whether a step on `threads` threads may draft: a check on that many passed for
        batches as large as the turn's, or none was made yet and the prior holds (a step on
        another count decodes plainly)."""
        check = self._checks.get(threads)
        if check is None and threads not in self._unchecked and (check := cached_check(self.runtime, threads)):
            self._checks[threads], self._sources[threads] = check, "cache"
        if check is None or not check.covers(self.state.draft_max + 1):
            self._unchecked.add(threads)
            return self.on_prior
        return check.passed

    def _exact_elsewhere(self) -> bool:
        """Whether a check passed on some thread count for batches as large as the turn's."""
        return any(c.passed and c.covers(self.state.draft_max + 1) for c in self._checks.values())

    @property
    def on_prior(self) -> bool:
        """Whether drafting may run before a check because the kernels make batches exact."""
        if self._prior is None:
            self._prior = prior_exact(self.runtime)
        return bool(self._prior)

    def set(self, mode: DraftMode, draft_max: int) -> Drafting:
        """What the next turn will run; nothing here calls llama.cpp (the UI thread may ask)."""
        self.state = self._judge(mode, draft_max)
        return self.state

    def _judge(self, mode: DraftMode, draft_max: int) -> Drafting:
        if mode == "off":
            return Drafting(mode, draft_max)
        info = self.runtime.info
        if not info.flash_attn:
            return Drafting(mode, draft_max, "flash attention is off (flash_attn = off); without it llama.cpp "
                                             "computes a verify batch's rows differently from single steps")
        if not can_remove_cells(self.runtime):
            return Drafting(mode, draft_max, "this model's cache is recurrent and cannot drop rejected drafts")
        check = self._check
        if check is None or not check.covers(draft_max + 1):
            return Drafting(mode, draft_max)  # checked after the next turn
        if not check.passed:
            why = (f"llama.cpp computes a batch's rows differently from single steps for this model here (by up to "
                   f"{check.worst:.2g} in a logit, {check.checked} tokens after {check.fill} cells), so drafts "
                   "would change replies")
            if info.kv_type == "f16" and check.fill >= 256:
                why += ("; one decode thread (threads = 1) or a quantized KV cache (kv_type = q8_0) avoids the "
                        "f16 long-context attention path that splits the work over threads")
            return Drafting(mode, draft_max, why)
        return Drafting(mode, draft_max)

    def for_turn(self) -> Drafting:
        """The drafting a turn starting now runs. Where no check covers this many drafts on the
        turn's thread count, `after_turn` checks it (see the module); the turn still drafts on
        the prior, or where the load moves its steps to a count whose check passed (`exact_at`
        decides step by step), and else decodes plainly. The turn is judged on the count it starts
        on, not on the one current when drafting was last set (the load may have moved it since)."""
        state = self.state = self._judge(self.state.mode, self.state.draft_max)
        self._pending, self._unchecked = None, set()
        if not state.active or (self._check is not None and self._check.covers(state.draft_max + 1)):
            return state
        self._pending = self._threads()
        if self.on_prior or self._exact_elsewhere():
            return state
        return Drafting(state.mode, state.draft_max, CHECK_PENDING)

    def remember_policy(self, threads: int) -> None:
        """Keep what the policy measured in a drafted turn on `threads` threads for the next process."""
        put_settings_entry(POLICY_CACHE, self.runtime, threads, self.policy.learned())

    def after_turn(self) -> None:
        """The checks a turn left pending: on its thread count, and on each count its steps ran
        on unchecked; remembered on disk. A context with no room left for one leaves the rest
        for a later turn."""
        counts = [n for n in dict.fromkeys([self._pending, *sorted(self._unchecked)]) if n is not None]
        self._pending, self._unchecked = None, set()
        if not self.state.active:
            return
        checked = False
        for threads in counts:
            known = self._checks.get(threads)
            if known is not None and known.covers(self.state.draft_max + 1):
                continue
            check = batch_check(self.runtime, self.state.draft_max + 1, threads, known)
            if check is None:
                break
            self._checks[threads], self._sources[threads], checked = check, "run", True
        if checked:
            self.set(self.state.mode, self.state.draft_max)

    def record(self, threads: int) -> dict:
        """The record's account of how drafting was made possible: where the exactness verdict
        for `threads` came from ("cache": an earlier process; "run": this one; "after this
        turn": checking now), and what was chosen at load for it."""
        pending = ON_PRIOR if self.on_prior else "after this turn"
        source = pending if self._pending is not None else self._sources.get(threads)
        extra: dict = {"draft_check": source} if source else {}
        if self.chosen:
            extra["draft_config"] = self.chosen
        return extra

    def decoder(self, sampler: Sampler, state: Drafting) -> tuple[SpeculativeDecoder, VerifyTarget]:
        """A decoder for one turn over the kept drafter and policy; close the target after the turn."""
        self.policy.k_max = state.draft_max
        threads = self._threads()
        if threads not in self._restored:  # the first drafted turn on this count: start where the last process left
            self._restored.add(threads)
            self.policy.restore(settings_entry(POLICY_CACHE, self.runtime, threads))
        if self._check is not None and self._check.covers(state.draft_max + 1):
            self.policy.seed(self._check.ratios)
            self.policy.sizes = frozenset(self._check.sizes)
        else:  # on the prior: only the sizes the check after the turn will decode
            self.policy.sizes = frozenset(check_sizes(state.draft_max + 1))
        target = VerifyTarget(self.runtime, sampler, capacity=state.draft_max + 1)
        decoder = SpeculativeDecoder(target, self.runtime.is_end_of_generation, drafter=self.drafter,
                                     policy=self.policy)
        decoder.begin(self.runtime.kv_tokens)
        return decoder, target
