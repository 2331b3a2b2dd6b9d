"""The last turn's prompt end: its tokens and the logits its prefill left there.

A regenerate of the last turn asks the same prompt again. The cache still holds that prompt's
rows, computed by that turn, and its reply after them; cutting the cache back to the prompt's
end and giving back the logits the prefill ended with (`LlamaRuntime.put_logits`, as think
more does at a thought's end) means nothing of the unchanged question is computed again, and
the first token is sampled from the very logits the first reply was, so a greedy reply repeats.
Running the last prompt token again instead would not do: a one-token batch takes llama.cpp's
decode path, which computes its row another way than a prefill batch (backend.SMALL_MIN).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


class PromptEnd:
    """What one turn's prefill ended with; forgotten whenever the cache is changed other than
    by that turn's own decoding (a restore, a clear, a cut into the prompt, prefill while typing)."""

    def __init__(self) -> None:
        self._prompt: tuple[int, ...] = ()
        self._logits: np.ndarray | None = None

    def remember(self, prompt: Sequence[int], logits: np.ndarray | None) -> None:
        self._prompt, self._logits = tuple(prompt), logits

    def forget(self) -> None:
        self._prompt, self._logits = (), None

    def cut_to(self, n: int) -> None:
        """The cache is kept up to `n` tokens: the logits hold only while the prompt is whole."""
        if n < len(self._prompt):
            self.forget()

    def restore(self, runtime, prompt: Sequence[int]) -> bool:
        """Cut the cache back to `prompt`'s end and give back its logits, when `prompt` is the one
        remembered and the cache still holds it; True when it did."""
        if self._logits is None or tuple(prompt) != self._prompt:
            return False
        n = len(self._prompt)
        if runtime.n_cached < n or runtime.kv_tokens[:n] != list(self._prompt):
            self.forget()
            return False
        runtime.keep_kv_prefix(n)
        return runtime.put_logits(self._logits)
