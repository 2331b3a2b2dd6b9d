"""The in-process backend's drafting: what was asked for, whether it can run here, and the
drafter and policy it keeps from turn to turn.

Drafting runs only where a verify batch gives exactly what single steps give, so that replies
do not change: flash attention must be on (without it llama.cpp's CPU attention gives a batch's
rows other logits), the cache must be able to drop rejected drafts (not a recurrent model), and
llama.cpp's kernels must give a batch's rows single steps' logits bit for bit on this model and
machine and decode thread count, which chatapp.engine.local.exact_batches checks once per count, at
the first drafted turn on it, on the turn's thread. Where batches differ at any size checked,
no step on that thread count drafts: where they differ moves with the text (see
exact_batches), so no smaller size can be trusted either. A step on a count not yet checked
(the thread policy backed off mid-turn) decodes plainly.
"""

from __future__ import annotations

from collections.abc import Callable

from chatapp.config import DraftMode, Settings
from chatapp.engine.backend import Drafting
from chatapp.engine.drafting.policy import DraftPolicy
from chatapp.engine.local.exact_batches import BatchCheck, batch_check, cached_check
from chatapp.engine.local.llama import LlamaRuntime, Sampler, VerifyTarget, can_remove_cells
from chatapp.engine.drafting.lookup import NgramDrafter
from chatapp.engine.drafting.speculative import SpeculativeDecoder


class LocalDrafting:
    def __init__(self, runtime: LlamaRuntime, policy: DraftPolicy | None = None,
                 threads: Callable[[], int] | None = None) -> None:
        """`threads`: the decode thread count a step would run on now (the backend's policy)."""
        self.runtime = runtime
        self.state = Drafting("off", Settings().draft_max)
        # One drafter and one policy for the backend's life: the step costs and acceptance they
        # measure carry from turn to turn, and the drafter's index grows with the cache.
        self.drafter = NgramDrafter()
        self.policy = policy or DraftPolicy()
        self._threads = threads or (lambda: runtime.threads[0])
        self._checks: dict[int, BatchCheck] = {}
        """The batch checks by decode thread count (exactness can change with it)."""

    @property
    def _check(self) -> BatchCheck | None:
        """The check for the thread count a step would run on now, if one was made."""
        n = self._threads()
        if n not in self._checks and (found := cached_check(self.runtime, n)) is not None:
            self._checks[n] = found
        return self._checks.get(n)

    @_check.setter
    def _check(self, check: BatchCheck) -> None:
        self._checks[self._threads()] = check

    def exact_at(self, threads: int) -> bool:
        """Whether a step on `threads` threads may draft: a check on that many passed for
        batches as large as the turn's (a step on another count decodes plainly)."""
        check = self._checks.get(threads)
        return check is not None and check.passed and check.covers(self.state.draft_max + 1)

    def set(self, mode: DraftMode, draft_max: int) -> Drafting:
        """What the next turn will run; nothing here calls llama.cpp (the UI thread may ask)."""
        self.state = self._judge(mode, draft_max)
        return self.state

    def _judge(self, mode: DraftMode, draft_max: int) -> Drafting:
        if mode == "off":
            return Drafting(mode, draft_max)
        info = self.runtime.info
        if not info.flash_attn:
            return Drafting(mode, draft_max, "flash attention is off (flash_attn = false); without it llama.cpp "
                                             "computes a verify batch's rows differently from single steps")
        if not can_remove_cells(self.runtime):
            return Drafting(mode, draft_max, "this model's cache is recurrent and cannot drop rejected drafts")
        check = self._check
        if check is None or not check.covers(draft_max + 1):
            return Drafting(mode, draft_max)  # checked at the start of the next turn
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
        """The drafting a turn starting now runs. Checks batches first when that was never done
        for this many drafts (on the turn's thread, after what the cache holds; see
        exact_batches). When the context has no room left for the check, this turn does not draft."""
        state = self.state
        if not state.active or (self._check is not None and self._check.covers(state.draft_max + 1)):
            return state
        check = batch_check(self.runtime, state.draft_max + 1, self._threads(), self._check)
        if check is None:
            return Drafting(state.mode, state.draft_max, "the context is too full to check, before the first "
                                                         "drafted turn, that drafts keep replies the same")
        self._check = check
        return self.set(state.mode, state.draft_max)

    def decoder(self, sampler: Sampler, state: Drafting) -> tuple[SpeculativeDecoder, VerifyTarget]:
        """A decoder for one turn over the kept drafter and policy; close the target after the turn."""
        self.policy.k_max = state.draft_max
        if self._check is not None:
            self.policy.seed(self._check.ratios)
        target = VerifyTarget(self.runtime, sampler, capacity=state.draft_max + 1)
        decoder = SpeculativeDecoder(target, self.runtime.is_end_of_generation, drafter=self.drafter,
                                     policy=self.policy)
        decoder.begin(self.runtime.kv_tokens)
        return decoder, target
