"""The in-process backend: llama.cpp through `LlamaRuntime`, one sequence, its KV cache.

A turn reuses the longest prefix the cache shares with the prompt, prefills the rest in
chunks (each one a single llama_decode that a stop can abandon mid-way, with a progress
event after it), then decodes one token per llama_decode, or, with drafting on, one
speculative step per llama_decode (chatapp.engine.drafting.speculative: prompt-lookup drafts verified
in one batch). Prefill figures come from llama.cpp's own perf counters, and so do decode's
without drafting; with drafting they are wall clock around the steps, because llama.cpp books
every multi-token batch as prompt evaluation (the record says "timing": "wall clock").
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np

from chatapp.config import DraftMode, Settings
from chatapp.engine import tokens as token_views
from chatapp.engine.inside.attention import AttentionMap, AttentionUnavailable, capture
from chatapp.engine.backend import (SMALL_MIN, CacheState, Drafting, GenerationSettings, ModelSummary, split_evenly)
from chatapp.engine.drafting.policy import DraftPolicy
from chatapp.engine.local.drafting import LocalDrafting, kv_for_drafting
from chatapp.engine.images import ImageFacts
from chatapp.engine.local.grammar_figures import grammar_record
from chatapp.engine.local.images import LocalImages
from chatapp.engine.local import scoring
from chatapp.engine.local.probing import ProbingSampler
from chatapp.engine.local.prompt_end import PromptEnd
from chatapp.engine.local.stop_text import StopText
from chatapp.engine.models.base_model import FALLBACK_STOPS, base_model_reason
from chatapp.engine.models.template import TEMPLATE_KEY
from chatapp.engine.events import BackendEvent, Generated, Message, PrefillDone, PrefillProgress, TextDelta
from chatapp.engine.machine.bandwidth import DecodeBandwidth
from chatapp.engine.machine.hardware import cpu_name, physical_cores
from chatapp.engine.local.llama import (
    CAPTURE_KV_TYPE, LlamaRuntime, LoadOptions, PerfCounters, Sampler, call_gbnf, gpu_offload_supported, model_n_head,
    replay_soft_max, versions)
from chatapp.engine.machine.roofline import prefill_flops_per_token, record_figures
from chatapp.engine.sampling import Scored
from chatapp.engine.stats import DraftFigures, LiveDecode, rate
from chatapp.engine.local.threads import ThreadPolicy
from chatapp.engine.thinking import Steering, ThoughtEnd
from chatapp.engine.tokens import Token, Utf8Stream, common_prefix

FLASH_ATTN_OPTION: dict[str, bool | None] = {"auto": None, "on": True, "off": False}
"""Settings.flash_attn as LoadOptions takes it (None: LlamaRuntime decides by device and KV type)."""


def display_name(path: Path) -> str:
    """The catalog name when the file is a catalog model, else the file name."""
    from chatapp.engine.models.catalog import load_catalog

    entry = next((e for e in load_catalog().entries if e.file == path.name), None)
    return entry.name if entry else path.name


def template_input(message: Message) -> dict[str, str]:
    """A message as llama.cpp's chat layer hands it to a template: a thought as `reasoning_content`
    and, for the templates that read that field instead (gpt-oss's), as `thinking` (llama-server
    does the same for its own templates, so the server backend sends `reasoning_content` alone)."""
    data = message.as_template_input()
    if "reasoning_content" in data:
        data["thinking"] = data["reasoning_content"]
    return data


class LocalBackend:
    """`Backend` over llama.cpp in this process."""

    def __init__(self, runtime: LlamaRuntime, name: str | None = None, threads: ThreadPolicy | None = None,
                 draft_policy: DraftPolicy | None = None, draft_config: str = "", projector: Path | None = None,
                 image_max_tokens: int = -1) -> None:
        """`draft_config`: what `load` changed so that drafts stay exact (see kv_for_drafting).
        `projector`: the model's mmproj GGUF, loaded on the first image (chatapp.engine.local.images)."""
        from chatapp.engine.models.projector import projector_info
        from chatapp.engine.models.quant import model_info  # the GGUF scan, cached per file

        self.runtime = runtime
        info = runtime.info
        facts = model_info(runtime.path)
        self.threads = threads or ThreadPolicy(physical_cores(), fixed=runtime.threads[0])
        self.summary = ModelSummary(
            name=name or display_name(runtime.path), path=str(runtime.path), kind="in-process",
            backend=info.backend, location="in-process", build=versions()["llama.cpp"], n_ctx=info.n_ctx,
            quant=facts.file_type, kv_type=info.kv_type, kv_bytes_per_token=runtime.kv_bytes_per_token,
            threads=info.n_threads, layers_offloaded=info.layers_offloaded, n_layer=info.n_layer,
            n_params=facts.n_params, size_bytes=facts.file_size, flash_attn=info.flash_attn,
            local_file=str(runtime.path),
            base_model=base_model_reason(runtime.path, template=runtime.metadata.get(TEMPLATE_KEY, "")),
            projector=projector_info(projector).describe() if projector is not None else None,
        )
        self._images = LocalImages(runtime, projector, n_threads=runtime.threads[1], image_max_tokens=image_max_tokens)
        self._facts = facts
        self._kv_bytes_per_token = runtime.kv_bytes_per_token
        self._bandwidth = DecodeBandwidth(info.backend, self.threads.fixed or physical_cores())
        self._drafting = LocalDrafting(runtime, draft_policy, threads=self.threads.decode_threads,
                                       chosen=draft_config)
        self._prompt_end = PromptEnd()  # a regenerate of the last turn prefills nothing
        self._stop_text = StopText(())

    @classmethod
    def load(cls, path: Path, settings: Settings, name: str | None = None,
             projector: Path | None = None) -> "LocalBackend":
        """`settings.threads` 0 lets ThreadPolicy choose (measured, fewer when the machine is busy).
        With drafting asked for, an f16 cache on the CPU loads as q8_0 (see kv_for_drafting).
        `projector`: the mmproj that images are read with, loaded on the first image."""
        key = f"{cpu_name()}|{physical_cores()}|{path.name}|{path.stat().st_size}"
        policy = ThreadPolicy(physical_cores(), fixed=settings.threads, key=key)
        policy.look(force=True)
        kv_type, chosen = kv_for_drafting(settings, on_gpu=settings.gpu_layers != 0 and gpu_offload_supported())
        options = LoadOptions(n_ctx=settings.n_ctx, n_threads=policy.decode_threads(),
                              n_threads_batch=policy.prefill_threads(), n_gpu_layers=settings.gpu_layers,
                              kv_type=kv_type, flash_attn=FLASH_ATTN_OPTION[settings.flash_attn])
        return cls(LlamaRuntime(path, options), name, threads=policy, draft_config=chosen,
                   projector=projector, image_max_tokens=settings.image_max_tokens or -1)

    # --- template and tokens -------------------------------------------------------------
    def render(self, messages: Sequence[Message], *, add_generation_prompt: bool,
               tools: Sequence[dict] | None = None, switches: Mapping[str, bool] | None = None) -> str:
        return self.runtime.render_chat([template_input(m) for m in messages],
                                        add_generation_prompt=add_generation_prompt, tools=list(tools or ()),
                                        switches=switches)

    def tokenize_prompt(self, text: str, images: Sequence[str] = ()) -> list[int]:
        rt = self.runtime
        bos_text = rt.token_bytes(rt.bos_id).decode("utf-8", "replace")
        add_bos = rt.adds_bos and not (bos_text and text.startswith(bos_text))
        if not images:
            return rt.tokenize(text, special=True, add_bos=add_bos)
        return self._images.tokenize(text, images, lambda part, first: rt.tokenize(
            part, special=True, add_bos=add_bos and first))

    def add_image(self, data: bytes, name: str) -> ImageFacts:
        return self._images.add(data, name)

    def tokenize(self, text: str) -> list[Token]:
        return token_views.tokenize_text(self.runtime, text)

    def describe(self, ids: Sequence[int]) -> list[Token]:
        return self._images.describe(token_views.describe(self.runtime, list(ids)))

    def cached_tokens(self) -> list[int]:
        return self.runtime.kv_tokens

    # --- drafting and the bandwidth bound ----------------------------------------------------
    @property
    def drafting(self) -> Drafting:
        return self._drafting.state

    def set_drafting(self, mode: DraftMode, draft_max: int) -> Drafting:
        return self._drafting.set(mode, draft_max)

    @property
    def bandwidth_gbps(self) -> float | None:
        """The memory read bandwidth decode runs against (chatapp.engine.machine.bandwidth), GB/s, as
        cached per machine; None where decode runs on a GPU, and on a new machine until the end of
        its first turn, which measures it after the reply (no first token waits for the probe)."""
        return self._bandwidth.gbps

    def _bytes_per_token(self, kv_used: int) -> int:
        """What decoding one token reads with `kv_used` cells in use (chatapp.engine.machine.roofline)."""
        return self._facts.decode_weight_bytes + self._kv_bytes_per_token * kv_used

    # --- a turn ----------------------------------------------------------------------------
    def interrupt(self) -> None:
        """Nothing to cut short: prefill polls the stop event inside llama.cpp, decode between steps."""

    def prefill(self, tokens: Sequence[int], stop: threading.Event, *, batch: int) -> Iterator[int]:
        """Prefill while typing: on one thread, the caller's (which the UI runs at a lower
        priority), so the UI keeps a core; llama.cpp gives the same rows on any thread count.
        It gives way when other programs keep every
        core busy."""
        rt, tokens = self.runtime, list(tokens)
        self._bandwidth.wait()
        spans = self._images.spans(tokens)
        rt.keep_kv_prefix(self._images.not_inside(spans, common_prefix(rt.kv_tokens, tokens)))
        tokens = tokens[:self._images.before_uncached_image(spans, len(tokens), rt.n_cached)]
        self._prompt_end.cut_to(rt.n_cached)
        before = rt.threads
        try:
            for size in split_evenly(len(tokens) - rt.n_cached, min(batch, rt.n_batch)):
                self.threads.look()
                if stop.is_set() or self.threads.others >= self.threads.cores:
                    return
                self._use_threads(before[0], 1)
                finished = rt.prefill(tokens[rt.n_cached:rt.n_cached + size], should_stop=stop.is_set)
                yield rt.n_cached
                if not finished:
                    return
        finally:
            self._use_threads(*before)

    def stream(self, prompt: Sequence[int], generation: GenerationSettings, stop: threading.Event, *,
               reuse_limit: int | None = None, forced: Sequence[int] = (),
               steer: Steering | None = None) -> Iterator[BackendEvent]:
        rt = self.runtime
        if generation.shape is not None:  # a grammar llama.cpp refuses is said before the prompt is read
            self._sampler(generation).close()
        self._bandwidth.wait()
        forced = list(forced)
        n_prompt = len(prompt)
        prompt = list(prompt) + forced  # forced reply tokens go in as the prompt's tail
        if steer is not None and steer.resume is not None:  # think more: the cache cut where the thought ended
            self._resume_thought(prompt, steer.resume)
        elif self._prompt_end.restore(rt, prompt):  # its rows and logits are that turn's own: reuse them all
            reuse_limit = None
        cached_before = rt.kv_tokens
        shared = common_prefix(cached_before, prompt)
        reuse_broken_at = shared if shared < len(cached_before) and shared < len(prompt) - 1 else None
        if shared == len(prompt) == rt.n_cached and rt.logits_ready:
            cached = shared  # prefilled to its end while it was typed: the first token's logits are waiting
        else:
            cached = min(shared, len(prompt) - 1)  # the last prompt token must run again to produce logits
        if reuse_limit is not None:
            cached = min(cached, reuse_limit)
            if 0 < len(prompt) - cached < SMALL_MIN:  # the end typed ahead, but its logits are gone
                cached = max(0, len(prompt) - SMALL_MIN)
        spans = self._images.spans(prompt)
        cached = self._images.not_inside(spans, cached)
        rt.keep_kv_prefix(cached)
        self._prompt_end.cut_to(cached)
        drafting = self._drafting.for_turn()
        rt.reset_perf()
        self._images.turn_started()
        todo = prompt[cached:]
        done, started = 0, time.perf_counter()
        self.threads.look(force=True)
        # A progress event after each batch (the Speed panel's live prefill figures); a stop does
        # not wait for a batch to end: llama.cpp abandons it mid-way. An image is decoded whole.
        for step in self._images.plan(prompt, cached, spans):
            if stop.is_set():
                break
            self._use_threads(rt.threads[0], self.threads.prefill_threads())
            if isinstance(step, int):
                finished = rt.prefill(todo[done:done + step], should_stop=stop.is_set)
            else:
                self._images.decode(step)
                finished = True
            done = rt.n_cached - cached
            yield PrefillProgress(done, len(todo), (time.perf_counter() - started) * 1000, rt.threads[1])
            if not finished:
                break
            self.threads.look()
        if done == len(todo):
            self._prompt_end.remember(prompt, rt.last_logits())
        after_prefill = rt.perf()
        prefill = PrefillDone(len(prompt), cached, done, after_prefill.prompt_ms + after_prefill.eval_ms,
                              reuse_broken_at, prefill_flops_per_token(self._facts))
        utf8 = Utf8Stream()  # forced text may end inside a character that decoding completes
        forced_text = self._forced_text(forced, utf8)
        if done < len(todo):  # stopped while the prompt was being read: nothing was generated
            yield Generated("stopped", "", 0, 0, 0.0, rt.n_cached, prefill, self._extra())
            return
        yield prefill
        if forced_text:
            yield TextDelta(forced_text, self._live(after_prefill, rt.n_cached))
        if steer is not None:
            steer.started(forced_text)
        self._stop_text = StopText(() if rt.metadata.get(TEMPLATE_KEY) else FALLBACK_STOPS)  # a base model's turn ends
        if drafting.active and steer is None and generation.reply_grammar is None:  # a grammar samples one at a time
            finished = self._decode_drafting(generation, stop, prefill, drafting, utf8)
        else:
            off_because = drafting.off_because or (
                "" if not drafting.active else
                "a reply under a grammar is sampled a token at a time (the grammar follows each one)"
                if generation.reply_grammar is not None else
                "a thinking turn decodes a token at a time (its budget and 'answer now' act per token)")
            finished = self._decode(generation, stop, after_prefill, prefill, off_because, utf8, steer)
        for event in finished:
            if isinstance(event, Generated) and forced:  # the reply (and its indexes) start with the forced
                event = replace(event, reply=forced_text + event.reply, forced=len(forced),
                                forced_prefilled=len(forced) - max(0, cached - n_prompt),
                                drafted=tuple(i + len(forced) for i in event.drafted))
            yield event
        # After the reply (its first token never waits for them): the one-off measurements left
        # pending, a drafting check, then the memory bandwidth on a new machine, on a thread of its
        # own so the turn ends now (the next one waits for it, see chatapp.engine.machine.bandwidth).
        self._drafting.after_turn()
        self._bandwidth.measure_later()

    def _resume_thought(self, prompt: list[int], end: ThoughtEnd) -> None:
        """Cut the cache back to where an earlier turn's thought ended (`prompt` is its prompt and
        its reply up to there) and give back the logits it had there, with the token that closed
        the thought ruled out: the thought goes on without a token run again."""
        rt = self.runtime
        if end.position != len(prompt) or rt.n_cached < end.position or rt.kv_tokens[:end.position] != prompt:
            return
        logits = end.logits.copy()
        if end.closing_token is not None:
            logits[end.closing_token] = -np.inf
        rt.keep_kv_prefix(end.position)
        self._prompt_end.cut_to(end.position)
        rt.put_logits(logits)

    def _forced_text(self, forced: list[int], utf8: Utf8Stream) -> str:
        rt = self.runtime
        return utf8.feed(b"".join(rt.token_bytes(t) for t in forced if not rt.is_special(t)))

    def _decode(self, generation: GenerationSettings, stop: threading.Event, after_prefill: PerfCounters,
                prefill: PrefillDone, draft_off_because: str, stream: Utf8Stream,
                steer: Steering | None = None) -> Iterator[BackendEvent]:
        """Plain decoding. With `steer` (a thinking model's turn), the thought's closing marker is
        forced, as tokens decoded in place of sampled ones, when its budget runs out or "answer
        now" is set (checked before each token is sampled)."""
        rt, policy = self.runtime, self.threads
        began = time.perf_counter()
        sampler = self._sampler(generation)
        parts, generated, finish, sampled = [], 0, "length", 0
        # the thinking format's markers where the vocabulary has them as control tokens (harmony's,
        # Gemma 4's channel, Command R7B's): kept in the text, so the split finds them
        markers = set(rt.tokenize(steer.fmt.markers, special=True)) if steer is not None else set()
        due: list[int] = []
        try:
            while generated < generation.max_tokens:
                if stop.is_set():
                    finish = "stopped"
                    break
                if steer is not None and not due:
                    due = list(steer.due())
                    if due:  # the thought ends here: what "think more" goes on from
                        steer.mark_end(rt.n_cached, rt.last_logits(), None)
                forcing = bool(due)
                if forcing:
                    token = due.pop(0)
                else:
                    token = sampler.sample()
                    if rt.is_end_of_generation(token):
                        if steer is not None and steer.splitter.in_thought and steer.forced_at is None:
                            steer.mark_end(rt.n_cached, rt.last_logits(), token)  # the thought ends with the turn
                            due = list(steer.ended_inside())
                            if due:
                                continue
                        finish = "stop"
                        break
                    sampled += 1
                generated += 1
                text = "" if rt.is_special(token) and token not in markers else stream.feed(rt.token_bytes(token))
                text = self._stop_text.feed(text)
                if self._stop_text.stopped:
                    parts.append(text)
                    finish = "stop"
                    break
                if steer is not None and not forcing and steer.may_close(text):
                    steer.mark_end(rt.n_cached, rt.last_logits(), token)
                if rt.n_cached >= rt.n_ctx:
                    parts.append(text)
                    finish = "context"
                    break
                threads = policy.decode_threads()
                self._use_threads(threads, rt.threads[1])
                step = time.perf_counter()
                rt.decode_one(token)
                policy.observe(threads, time.perf_counter() - step)
                policy.look()
                if steer is not None:
                    steer.after(text, sampled=not forcing)
                if text:
                    parts.append(text)
                    # Per token, the runtime's own count of cached tokens (kept equal to llama.cpp's)
                    # spares a llama.cpp call; the record below asks llama.cpp itself.
                    yield TextDelta(text, self._live(after_prefill, rt.n_cached))
        except KeyboardInterrupt:
            finish = "stopped"
        finally:
            sampler.close()
        parts.append(self._stop_text.feed(stream.flush()) + self._stop_text.flush())
        live = self._live(after_prefill, rt.kv_cells_used())
        plain = {"draft": "off", "draft_tokens": 0, "draft_accepted": 0, "decode_steps": live.decode_tokens,
                 "decode_wall_ms": round((time.perf_counter() - began) * 1000, 3)}
        if draft_off_because:  # asked for, and why it did not run
            plain |= {"draft_off_because": draft_off_because, **self._drafting.record(rt.threads[0])}
        if steer is not None:
            plain |= steer.record() | {"thinking_forced_tokens": generated - sampled}
        plain |= grammar_record(getattr(sampler, "grammar_steps", ()))
        yield Generated(finish, "".join(parts), generated, live.decode_tokens, live.decode_ms, live.kv_used,
                        prefill, self._turn_extra(prefill, live, plain), probs=self._probs(sampler, sampled))

    def _decode_drafting(self, generation: GenerationSettings, stop: threading.Event, prefill: PrefillDone,
                         drafting: Drafting, stream: Utf8Stream) -> Iterator[BackendEvent]:
        """The decode loop with speculative steps: each step decodes the next token and the drafts
        the policy chose in one batch and emits what the model agrees with (see SpeculativeDecoder
        for why the reply is what plain decoding gives). The cache ends as the plain loop leaves it."""
        rt, threads = self.runtime, self.threads
        began = time.perf_counter()
        sampler = self._sampler(generation)
        decoder, target = self._drafting.decoder(sampler, drafting)
        parts, generated, finish, drafted = [], 0, "length", []
        after_batch = False
        try:
            while generated < generation.max_tokens:
                if stop.is_set():
                    finish = "stopped"
                    break
                n = threads.decode_threads()
                self._use_threads(n, n)  # a verify batch runs on llama.cpp's batch threads
                # Steps on a thread count whose batches were not found exact decode plainly (see
                # LocalDrafting). While the thread count is measured, only plain steps are timed
                # for it, and not the one after a batch (it pays the graph's rebuild): drafts do
                # not wait for the measure (a fresh home's first 24 steps were all plain). The
                # first step is plain: the first token is shown after one step, not after a batch.
                step = decoder.step(generation.max_tokens - generated, rt.n_ctx - rt.n_cached,
                                    draft=generated > 0 and self._drafting.exact_at(n))
                if step.batch == 1 and not after_batch:
                    threads.observe(n, step.ms / 1000)
                after_batch = step.batch > 1
                threads.look()
                live = self._live_drafting(decoder.stats.figures(), rt.n_cached)
                texts = []
                for token, from_draft in zip(step.tokens, step.from_draft):
                    if rt.is_end_of_generation(token):
                        break
                    if from_draft:
                        drafted.append(generated)
                    generated += 1
                    if not rt.is_special(token) and (text := self._stop_text.feed(stream.feed(rt.token_bytes(token)))):
                        texts.append(text)
                    if self._stop_text.stopped:
                        break
                if texts:  # one event a step: a step that accepted 40 drafts is one update, not 40
                    text = "".join(texts)
                    parts.append(text)
                    yield TextDelta(text, live)
                if step.ended or step.full or self._stop_text.stopped:
                    finish = "context" if step.full and not step.ended and not self._stop_text.stopped else "stop"
                    break
            decoder.settle(rt.n_ctx - rt.n_cached)
        except KeyboardInterrupt:
            finish = "stopped"
        finally:
            target.close()
            sampler.close()
        parts.append(self._stop_text.feed(stream.flush()) + self._stop_text.flush())
        figures = decoder.stats.figures()
        live = self._live_drafting(figures, rt.kv_cells_used())
        drafting_figures = {**figures.record(), **self._drafting.record(rt.threads[0]),
                            "decode_wall_ms": round((time.perf_counter() - began) * 1000, 3)}
        yield Generated(finish, "".join(parts), generated, live.decode_tokens, live.decode_ms, live.kv_used,
                        prefill, self._turn_extra(prefill, live, drafting_figures), drafted=tuple(drafted),
                        probs=self._probs(sampler, generated))
        self._drafting.remember_policy(rt.threads[0])  # after the reply is out, for the next process

    def _sampler(self, generation: GenerationSettings) -> Sampler | ProbingSampler:
        """The turn's chain; one that reports each step when the turn asks for probabilities."""
        grammar = generation.reply_grammar
        gbnf = (grammar.gbnf or call_gbnf(grammar.schema, grammar.prefix, grammar.suffix)) if grammar else None
        sampler = self.runtime.sampler(temperature=generation.temperature, top_k=generation.top_k,
                                       top_p=generation.top_p, min_p=generation.min_p, seed=generation.seed,
                                       grammar=gbnf, count_mask=generation.grammar_mask)
        return ProbingSampler(sampler, generation.logprobs) if generation.logprobs > 0 else sampler

    def _probs(self, sampler: Sampler | ProbingSampler, generated: int) -> tuple:
        """The reply's steps (the end-of-generation token's draw, when there was one, left out)."""
        if not isinstance(sampler, ProbingSampler):
            return ()
        rt = self.runtime
        reply = [step.token for step in sampler.taken[:generated]]
        # A character split over tokens shows on the token that completes it, as in the Tokens panel.
        chosen = ["" if t.special else t.piece for t in token_views.describe(rt, reply)]
        return sampler.steps(lambda t: rt.token_bytes(t).decode("utf-8", "replace"), chosen)

    def _use_threads(self, decode: int, batch: int) -> None:
        if self.runtime.threads != (decode, batch):
            self.runtime.set_threads(decode, batch)

    def _live(self, after_prefill: PerfCounters, kv_used: int) -> LiveDecode:
        now = self.runtime.perf()
        threads = self.runtime.threads[0]
        return LiveDecode(decode_tokens=now.eval_tokens - after_prefill.eval_tokens,
                          decode_ms=now.eval_ms - after_prefill.eval_ms, kv_used=kv_used, threads=threads,
                          threads_reason=self.threads.reason(threads), bytes_per_token=self._bytes_per_token(kv_used),
                          bandwidth_gbps=self.bandwidth_gbps, bandwidth_note=self._bandwidth.note)

    def _live_drafting(self, figures: DraftFigures, kv_used: int) -> LiveDecode:
        threads = self.runtime.threads[0]
        return LiveDecode(decode_tokens=figures.tokens, decode_ms=figures.decode_ms, kv_used=kv_used,
                          threads=threads, threads_reason=self.threads.reason(threads),
                          bytes_per_token=self._bytes_per_token(kv_used), bandwidth_gbps=self.bandwidth_gbps,
                          bandwidth_note=self._bandwidth.note, draft=figures)

    def _turn_extra(self, prefill: PrefillDone, live: LiveDecode, drafting: dict) -> dict:
        """The record's backend figures: threads, drafting, and decode's memory traffic at the
        reply's mean fill (the cache grew by a cell a token from the prompt's end)."""
        mean_fill = (prefill.prompt_tokens + live.kv_used) // 2
        traffic = record_figures(self._facts, self.runtime.info.kv_type, mean_fill,
                                 rate(live.decode_tokens, live.decode_ms), self.bandwidth_gbps, self._bandwidth.note)
        return {**self._extra(), **drafting, **traffic, "prefill_flops_per_token": prefill.flops_per_token,
                **self._images.turn_figures(self.runtime.kv_tokens)}

    def _extra(self) -> dict:
        decode, batch = self.runtime.threads
        return {"threads": decode, "threads_batch": batch, "threads_reason": self.threads.reason(decode)}

    # --- attention -----------------------------------------------------------------------------
    def attention(self, tokens: Sequence[int], reply_start: int, head_layer: int | None,
                  stop: threading.Event) -> AttentionMap | AttentionUnavailable:
        """A replay of `tokens` in a capture context of its own (chatapp.engine.inside.attention)."""
        rt = self.runtime
        if self._images.spans(tokens):
            return AttentionUnavailable("the turn holds an image, whose cells the replay cannot read as tokens")
        if rt.info.backend != "CPU":
            return AttentionUnavailable(
                f"attention capture is not available on {rt.info.backend}: it is verified on the CPU backend "
                "only (a model loaded with gpu_layers = 0 runs there)")
        return capture(
            lambda ids, collector, should_stop: replay_soft_max(rt, ids, collector, should_stop),
            tokens, reply_start, n_layer=rt.info.n_layer, n_head=model_n_head(rt), head_layer=head_layer,
            kv_type=CAPTURE_KV_TYPE, chat_kv_type=rt.info.kv_type, stop=stop)

    # --- a reply scored after the fact --------------------------------------------------------
    def score(self, prompt: Sequence[int], reply: Sequence[int], generation: GenerationSettings, n_top: int,
              stop: threading.Event) -> Scored:
        """One prefill pass over the reply with logits at every row (chatapp.engine.local.scoring)."""
        self._use_threads(self.runtime.threads[0], self.threads.prefill_threads())
        self._prompt_end.forget()  # it prefills the prompt's rows again, in another split
        self._images.feed(prompt)  # an image's cells from its embeddings: the pass reuses them
        return scoring.score(self.runtime, prompt, reply, generation, n_top, stop)

    # --- the cache ---------------------------------------------------------------------------
    def clear_cache(self) -> None:
        self._prompt_end.forget()
        self.runtime.clear_kv()

    def fingerprint(self) -> dict[str, str | int | bool]:
        """The model's sha256 (cached by file identity), context, KV type and the build."""
        from chatapp.engine.filecache import file_sha256

        info, found = self.runtime.info, versions()
        return {
            "model_sha256": file_sha256(self.runtime.path),
            "model": self.summary.name,
            "quant": self.summary.quant or "",
            "n_ctx": info.n_ctx,
            "kv_type": info.kv_type,
            "flash_attn": info.flash_attn,
            "llama_cpp": found["llama.cpp"],
            "llama_cpp_python": found["llama-cpp-python"],
        }

    def save_cache(self, key: str) -> CacheState:
        return CacheState(self.runtime.kv_tokens, self.runtime.seq_state())

    def keep_cache_prefix(self, n: int) -> None:
        self._prompt_end.cut_to(n)
        self.runtime.keep_kv_prefix(n)

    def restore_cache(self, state: CacheState, keep: int) -> bool:
        rt = self.runtime
        self._prompt_end.forget()  # the restored rows may come from another computation of the same tokens
        try:
            loaded = rt.restore_seq_state(state.payload, state.tokens)
        except Exception:  # noqa: BLE001 - any failure inside the binding means: not restored
            loaded = False
        if not loaded:
            rt.clear_kv()
            return False
        rt.keep_kv_prefix(keep)
        return True

    def close(self) -> None:
        self._bandwidth.wait()  # its figure is written for the next process
        self._images.close()
        self.runtime.close()
