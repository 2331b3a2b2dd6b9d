"""Inside the next token, on the in-process model: the surprise of a text's tokens, the logit lens
and the sampler chain stage by stage (chatapp.engine.inside.{surprise,lens,sampler_chain} say what
each shows). Each runs in a tap context of its own on the runtime's loaded model
(chatapp.engine.local.llama.TapContext); the runtime's context and cache are never touched.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np

from chatapp.config import Settings
from chatapp.engine import tokens as token_views
from chatapp.engine.inside import lens as lens_view
from chatapp.engine.inside import sampler_chain, surprise
from chatapp.engine.local.llama import LlamaRuntime, LoadOptions, StagedSampler, TapContext
from chatapp.errors import InputError

DECODE_STEPS = 32
"""Tokens `decode_speed` times: about 0.3 s for the default model on 2 cores."""


class NextTokenViews:
    """The three views over one runtime (owned when made by `load`)."""

    def __init__(self, runtime: LlamaRuntime, *, owned: bool = False,
                 open_other: Callable[[str], NextTokenViews] | None = None) -> None:
        self.runtime = runtime
        self._owned = owned
        self._open_other = open_other
        """Opens a second model's views by the name a user gives it (`compare_to`)."""
        self._head: lens_view.OutputHead | None = None
        self._head_lock = threading.Lock()

    @classmethod
    def load(cls, path: Path, settings: Settings, n_ctx: int = 256) -> NextTokenViews:
        """A runtime of its own on `path`, on the CPU (the lens's rounding follows the CPU's kernels);
        n_ctx only for `generate`: the views make contexts of their own."""
        options = LoadOptions(n_ctx=n_ctx, n_threads=settings.threads, n_threads_batch=settings.threads,
                              n_gpu_layers=0, kv_type=settings.kv_type,
                              flash_attn={"on": True, "off": False}.get(settings.flash_attn))
        return cls(LlamaRuntime(path, options), owned=True)

    # --- tokens -----------------------------------------------------------------------------------
    def text_ids(self, text: str) -> list[int]:
        """`text` as llama-perplexity tokenizes it: BOS first when the model adds one, special
        tokens' text as plain text."""
        return self.runtime.tokenize(text, special=False, add_bos=self.runtime.adds_bos)

    @property
    def name(self) -> str:
        """The model's file name, as a comparison names it."""
        return self.runtime.path.name

    @property
    def text_start(self) -> int:
        """Where the text begins in `text_ids`: 1 after the BOS the model adds, else 0."""
        return 1 if self.runtime.adds_bos else 0

    def chat_prompt_ids(self, system: str, prompt: str) -> list[int]:
        """The first turn's prompt for `prompt` under `system`, as the model's template renders it
        (generation prompt included)."""
        rt = self.runtime
        rendered = rt.render_chat([{"role": "system", "content": system}, {"role": "user", "content": prompt}],
                                  add_generation_prompt=True)
        return rt.tokenize(rendered, special=True, add_bos=rt.adds_bos)

    @property
    def n_ctx(self) -> int:
        """Cells of the context `generate` writes in."""
        return self.runtime.n_ctx

    def pieces(self, ids: Sequence[int]) -> list[str]:
        return [t.piece for t in token_views.describe(self.runtime, list(ids))]

    def piece(self, token: int) -> str:
        return token_views.describe(self.runtime, [token])[0].piece

    # --- surprise -----------------------------------------------------------------------------------
    def surprise(self, ids: Sequence[int], ctx: int, should_stop: Callable[[], bool] = lambda: False, *,
                 only_scored: bool = False) -> surprise.Surprise | None:
        """Each token's surprise in windows of `ctx` tokens, or (only_scored) only that of the tokens
        llama-perplexity scores (chatapp.engine.inside.surprise)."""
        ids = list(ids)
        surprise.check_ctx(ctx, self.runtime.n_ctx_train)
        tap, decode = self._window_decoder(min(ctx, len(ids)))
        try:
            return surprise.measure(ids, self.pieces(ids), ctx, decode, bos=self._bos(), should_stop=should_stop,
                                    only_scored=only_scored)
        finally:
            tap.close()

    def compare_to(self, spec: str, ids: Sequence[int], ctx: int,
                   should_stop: Callable[[], bool] = lambda: False) -> surprise.QuantCost | None:
        """`compare` with the model `spec` names (a path or a store name), loaded for this and
        closed after; None when should_stop said so."""
        if self._open_other is None:
            raise InputError("these views were not given a way to open a second model")
        other = self._open_other(spec)
        try:
            shown = Path(spec).name if Path(spec).is_file() else spec  # a store's name as given, a file's name
            return self.compare(ids, ctx, other, names=(self.runtime.path.name, shown), should_stop=should_stop)
        finally:
            other.close()

    def compare(self, ids: Sequence[int], ctx: int, other: NextTokenViews, *, only_scored: bool = False,
                names: tuple[str, str] | None = None,
                should_stop: Callable[[], bool] = lambda: False) -> surprise.QuantCost | None:
        """This model against `other` (a second quant of it) over the same windows of `ids`, with
        both files' sizes and decode speeds (`names`: how the user named them; else the files');
        None when should_stop said so."""
        ids = list(ids)
        if other.runtime.n_vocab < self.runtime.n_vocab or other.text_ids("a b c") != self.text_ids("a b c"):
            raise InputError("the second model does not share this one's vocabulary: "
                             "it is not a quant of the same model")
        surprise.check_ctx(ctx, min(self.runtime.n_ctx_train, other.runtime.n_ctx_train))
        tap, decode = self._window_decoder(min(ctx, len(ids)))
        other_tap, other_decode = other._window_decoder(min(ctx, len(ids)))
        try:
            cost = surprise.compare(ids, self.pieces(ids), ctx, decode, other_decode, bos=self._bos(),
                                    only_scored=only_scored, should_stop=should_stop)
        finally:
            tap.close()
            other_tap.close()
        if cost is None:
            return None
        names = names or (self.runtime.path.name, other.runtime.path.name)
        files = tuple(surprise.QuantFile(name, views.runtime.path.stat().st_size, views.decode_speed(ids[:8]))
                      for name, views in zip(names, (self, other)))
        return replace(cost, files=files)

    def decode_speed(self, prompt: Sequence[int], steps: int = DECODE_STEPS) -> float:
        """Tokens a second decoding one token a step (greedy) after `prompt`, in a tap context on
        the runtime's decode threads: the speed a reply is written at, for comparing two files."""
        prompt = list(prompt) or [self.runtime.bos_id]
        tap = TapContext(self.runtime, len(prompt) + steps + 1)
        try:
            logits = tap.decode(prompt, 0, "last")[0]
            started = time.perf_counter()
            for step in range(steps):
                logits = tap.decode([int(np.argmax(logits))], len(prompt) + step, "last", copy=False)[0]
            return steps / (time.perf_counter() - started)
        finally:
            tap.close()

    def _bos(self) -> int | None:
        return self.runtime.bos_id if self.runtime.adds_bos else None

    def _window_decoder(self, window: int) -> tuple[TapContext, Callable[[Sequence[int], int], np.ndarray]]:
        """A tap context for windows of up to `window` tokens, and a function decoding one window
        from an empty cache with logits at every position from `first_row` on (a window of one
        batch: llama.cpp's own rows, valid until the next window)."""
        tap = TapContext(self.runtime, window, n_batch=min(window, 512))

        def decode(tokens: Sequence[int], first_row: int) -> np.ndarray:
            tap.clear()
            if len(tokens) <= tap.n_batch:
                return tap.decode(tokens, 0, first_row, copy=False)
            rows = []
            for s in range(0, len(tokens), tap.n_batch):
                chunk = tokens[s:s + tap.n_batch]
                wanted = first_row < s + len(chunk)  # a chunk before first_row only fills the cache
                found = tap.decode(chunk, s, max(0, first_row - s) if wanted else "last")
                if wanted:
                    rows.append(found)
            return np.concatenate(rows)

        return tap, decode

    # --- the logit lens -------------------------------------------------------------------------------
    def output_head(self) -> lens_view.OutputHead:
        """The final norm and output head, dequantized once per runtime (about a second for the
        default model)."""
        with self._head_lock:
            if self._head is None:
                self._head = lens_view.OutputHead(self.runtime.path)
            return self._head

    def lens(self, ids: Sequence[int], position: int, token: int | None, k: int = lens_view.TOP) -> lens_view.Lens:
        """The lens at `position` of `ids` (it predicts position + 1): the text up to there decoded in
        a tap context that reads every layer's output row at that position."""
        ids = list(ids)
        if not 0 <= position < len(ids):
            raise InputError(f"position {position} is outside the {len(ids)} tokens")
        head = self.output_head()
        prefix = ids[:position + 1]
        tap = TapContext(self.runtime, len(prefix), taps=(lens_view.LAYER_OUTPUT.encode(),))
        try:
            for start in range(0, len(prefix), tap.n_batch):
                logits = tap.decode(prefix[start:start + tap.n_batch], start, "last")
            return lens_view.read(head, tap.tapped, logits[0], position, token, self.piece, k)
        finally:
            tap.close()

    # --- the sampler chain -------------------------------------------------------------------------------
    def generate(self, prompt: Sequence[int], *, temperature: float, top_k: int, top_p: float, min_p: float,
                 seed: int, max_tokens: int) -> list[int]:
        """A reply drawn by llama.cpp's own chain (llama_sampler_sample, or at temperature 0 the
        argmax it takes, as a turn draws) in the runtime's context, prompt prefilled in batches
        and the reply decoded a token a step."""
        rt = self.runtime
        rt.clear_kv()
        rt.eval(list(prompt))
        sampler = rt.sampler(temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p, seed=seed)
        reply: list[int] = []
        try:
            while len(reply) < max_tokens and rt.n_cached < rt.n_ctx:
                token = sampler.sample()
                reply.append(token)
                if rt.is_end_of_generation(token):
                    break
                rt.decode_one(token)
        finally:
            sampler.close()
            rt.clear_kv()
        return reply

    def replay_chain(self, prompt: Sequence[int], reply: Sequence[int], *, temperature: float, top_k: int,
                     top_p: float, min_p: float, seed: int, turn_drew: bool = True,
                     should_stop: Callable[[], bool] = lambda: False) -> sampler_chain.ChainReplay | None:
        """The chain stage by stage at every reply position: the prompt decoded in batches of the
        runtime's size, then each reply token one step at a time, as a turn decodes them, and the
        session's samplers applied one by one to each position's logits with `seed`. `turn_drew`:
        the reply is what a turn drew (each step records it to compare). None when stopped."""
        prompt, reply = list(prompt), list(reply)
        started = time.perf_counter()
        tap = TapContext(self.runtime, len(prompt) + len(reply), n_batch=self.runtime.n_batch)
        stages = StagedSampler(temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p, seed=seed)
        steps = []
        try:
            for start in range(0, len(prompt), tap.n_batch):
                logits = tap.decode(prompt[start:start + tap.n_batch], start, "last")[0]
            for index, turn_token in enumerate(reply):
                if should_stop():
                    return None
                token, snapshots = stages.step(logits)
                steps.append(sampler_chain.step(index, logits, token, turn_token if turn_drew else None, snapshots,
                                                self.piece))
                if index + 1 < len(reply):
                    logits = tap.decode([turn_token], len(prompt) + index, "last")[0]
        finally:
            stages.close()
            tap.close()
        settings = {"temperature": temperature, "top_k": top_k, "top_p": top_p, "min_p": min_p, "seed": seed}
        return sampler_chain.ChainReplay(settings, tuple(steps), time.perf_counter() - started)

    def close(self) -> None:
        if self._owned:
            self.runtime.close()
