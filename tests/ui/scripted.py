"""A scripted `Backend`, only for UI snapshots, which need identical text and figures on
every run. Feature tests use the real model (and the real backends).

It speaks ChatML, cuts text into words, answers with a fixed reply, and books fixed times:
4 ms per prefilled token, 10 ms per decoded token. Its attention weights are made up (each
query's weight falls off with distance, plus a share on the first token), fed through the real
collector with next-token predictions that are the reply's own: only for snapshots of the
attention view.
"""

from __future__ import annotations

import math
import re
import threading
from collections.abc import Iterator, Sequence

import numpy as np

from chatapp.config import DraftMode
from chatapp.engine.inside.attention import AttentionMap, AttentionUnavailable, SoftMaxCollector, capture
from chatapp.engine.backend import CacheState, Drafting, GenerationSettings, ModelSummary, split_evenly
from chatapp.engine.events import BackendEvent, Generated, Message, PrefillDone, PrefillProgress, TextDelta
from chatapp.engine.sampling import Candidate, Scored, TokenProbs
from chatapp.engine.stats import LiveDecode
from chatapp.engine.tokens import Token, common_prefix
from chatapp.errors import AttachmentError

SPECIALS = {"<|im_start|>": 1, "<|im_end|>": 2}
# A newline is a token of its own, as in the real models' pre-tokenizers: were it merged into the
# word after it, a reply cached after "assistant\n" would tokenize another way in the history, and
# the panels would predict a re-prefill no real template causes.
WORD = re.compile(r"<\|im_(?:start|end)\|>|\n|[^\S\n]*[^\s<]+|[^\S\n]+|<")
REPLY = ("Prefill reads the whole prompt in parallel; **decode** then adds one token at a time.\n\n"
         "- the KV cache keeps what was computed\n- quantization shrinks the weights")


class ScriptedBackend:
    def __init__(self, model_path: str, n_ctx: int = 4096, reply: str = REPLY):
        self.summary = ModelSummary(
            name="smollm2-135m-instruct", path=model_path, kind="in-process", backend="CPU",
            location="in-process", build="scripted", n_ctx=n_ctx, quant="Q4_1", kv_type="f16",
            kv_bytes_per_token=23040, threads=2, layers_offloaded=0, n_layer=30, flash_attn=False,
            local_file=model_path)
        self._words: dict[str, int] = {"": 0, **SPECIALS}
        self._by_id: dict[int, str] = {v: k for k, v in self._words.items()}
        self._kv: list[int] = []
        self._reply = reply
        self.drafting = Drafting("off", 8)

    # --- tokens ----------------------------------------------------------------------------
    def _ids(self, text: str, special: bool) -> list[int]:
        ids = []
        for word in WORD.findall(text):
            key = word if special or word not in SPECIALS else "\0" + word  # typed specials stay text
            if key not in self._words:
                self._words[key] = len(self._words) + 100
                self._by_id[self._words[key]] = word
            ids.append(self._words[key])
        return ids

    def render(self, messages: Sequence[Message], *, add_generation_prompt: bool, tools=None, switches=None) -> str:
        text = "".join(f"<|im_start|>{m.role}\n{m.content}<|im_end|>\n" for m in messages)
        return text + ("<|im_start|>assistant\n" if add_generation_prompt else "")

    def tokenize_prompt(self, text: str, images: Sequence[str] = ()) -> list[int]:
        return self._ids(text, special=True)

    def add_image(self, data: bytes, name: str):
        raise AttachmentError("the scripted model sees no images")

    def describe(self, ids: Sequence[int]) -> list[Token]:
        return [Token(i, self._by_id.get(i, ""), i in (1, 2), self._by_id.get(i, "").encode()) for i in ids]

    def tokenize(self, text: str) -> list[Token]:
        return self.describe(self._ids(text, special=False))

    def cached_tokens(self) -> list[int]:
        return list(self._kv)

    # --- a turn ----------------------------------------------------------------------------
    def stream(self, prompt: Sequence[int], generation: GenerationSettings, stop: threading.Event, *,
               reuse_limit: int | None = None, forced: Sequence[int] = (), steer=None) -> Iterator[BackendEvent]:
        prompt = list(prompt)
        cached = min(common_prefix(self._kv, prompt), len(prompt) - 1)
        self._kv = prompt
        prefill_ms = 4.0 * (len(prompt) - cached)
        yield PrefillProgress(len(prompt) - cached, len(prompt) - cached, prefill_ms, 2)
        prefill = PrefillDone(len(prompt), cached, len(prompt) - cached, prefill_ms, None)
        yield prefill
        reply, decoded = "", 0
        for token in self._ids(self._reply, special=False)[: generation.max_tokens]:
            if stop.is_set():
                break
            decoded += 1
            self._kv.append(token)
            reply += self._by_id[token]
            yield TextDelta(self._by_id[token], LiveDecode(decoded, 10.0 * decoded, len(self._kv)))
        finish = "stopped" if stop.is_set() else "stop"
        yield Generated(finish, reply, decoded, decoded, 10.0 * decoded, len(self._kv), prefill, {"threads": 2})

    def interrupt(self) -> None:
        pass

    def prefill(self, tokens: Sequence[int], stop: threading.Event, *, batch: int) -> Iterator[int]:
        tokens = list(tokens)
        self._kv = self._kv[:common_prefix(self._kv, tokens)]
        for size in split_evenly(len(tokens) - len(self._kv), batch):
            if stop.is_set():
                return
            self._kv = tokens[:len(self._kv) + size]
            yield len(self._kv)

    # --- a reply scored (scripted probabilities) ---------------------------------------------------
    def score(self, prompt: Sequence[int], reply: Sequence[int], generation: GenerationSettings, n_top: int,
              stop: threading.Event) -> Scored:
        """Every reply token at 90%, "the" the one alternative: only for snapshots."""
        prompt, reply = list(prompt), list(reply)
        cached = min(common_prefix(self._kv, prompt), len(prompt) - 1)
        self._kv = prompt + reply
        other = self._ids(" the", special=False)[0]
        probs = tuple(TokenProbs(t, self._by_id.get(t, ""), math.log(0.9), 0.9, 1, 1, 0.5,
                                 (Candidate(t, self._by_id.get(t, ""), math.log(0.9), 0.9),
                                  Candidate(other, " the", math.log(0.1), 0.1))[:max(n_top, 1)])
                      for t in reply)
        return Scored(probs, cached, len(self._kv) - cached, 4.0 * (len(self._kv) - cached))

    # --- attention (scripted weights) ---------------------------------------------------------
    N_HEAD = 3

    def attention(self, tokens: Sequence[int], reply_start: int, head_layer: int | None,
                  stop: threading.Event) -> AttentionMap | AttentionUnavailable:
        return capture(self._replay, tokens, reply_start, n_layer=self.summary.n_layer, n_head=self.N_HEAD,
                       head_layer=head_layer, kv_type="f16", chat_kv_type="f16", stop=stop)

    def _replay(self, tokens: Sequence[int], collector: SoftMaxCollector, should_stop) -> bool:
        n_kv = -(-len(tokens) // 256) * 256
        for start in range(0, len(tokens), 256):
            wanted = collector.rows_wanted(start, min(256, len(tokens) - start))
            if wanted is None:
                continue
            queries = np.arange(start + wanted[0], start + wanted[1])[:, None]
            keys = np.arange(n_kv)[None, :]
            for layer in range(self.summary.n_layer):
                heads = []
                for head in range(self.N_HEAD):
                    distance = np.maximum(queries - keys, 0) + 1.0
                    rows = np.where(keys <= queries, distance ** -(1 + (layer + head) % 3 / 2), 0)
                    rows[:, 0] += 1.0 + layer % 4
                    heads.append(rows / rows.sum(axis=1, keepdims=True))
                collector.take(layer, start + wanted[0], np.array(heads, dtype=np.float32))
            following = [*tokens[start + wanted[0] + 1: start + wanted[1] + 1], 0]  # 0: after the last token
            collector.take_next(start + wanted[0], np.array(following[: wanted[1] - wanted[0]]))
        return True

    def set_drafting(self, mode: DraftMode, draft_max: int) -> Drafting:
        self.drafting = Drafting(mode, draft_max, "" if mode == "off" else "the scripted backend does not draft")
        return self.drafting

    # --- the cache ---------------------------------------------------------------------------
    def clear_cache(self) -> None:
        self._kv.clear()

    def keep_cache_prefix(self, n: int) -> None:
        del self._kv[n:]

    def fingerprint(self) -> dict[str, str | int | bool]:
        return {"model_sha256": "scripted", "n_ctx": self.summary.n_ctx}

    def save_cache(self, key: str) -> CacheState:
        return CacheState(list(self._kv), bytes(len(self._kv)))

    def restore_cache(self, state: CacheState, keep: int) -> bool:
        self._kv = list(state.tokens[:keep])
        return True

    def close(self) -> None:
        pass
