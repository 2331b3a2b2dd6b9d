"""The llama-server backend: the same turn, over HTTP, on llama.cpp's own server.

A turn goes to /completion as token ids (the engine's prompt), streaming, on one pinned slot
whose KV cache the server keeps between turns (cache_prompt), with the in-process sampler
chain. The server's own figures fill the record: its final `timings` say how much of the
prompt it reused (cache_n), prefilled (prompt_n) and generated, so prompt_tokens,
cached_tokens and prefill_tokens mean what they mean in-process. Its raw timings go into the
record's extra as `server_timings`.

The backend keeps the token ids the slot holds (what it was sent, what it generated, cut to
the server's `tokens_cached`), for the Tokens panel and for sessions. A streamed token that
ends part of a character comes together with the next one (the server sends whole UTF-8
only, with the last id); those ids are recovered by tokenizing that text and kept only when
the count and the last id agree, else the list stops there rather than guess.

Stopping shuts the stream's socket down: the reader wakes at once, the server sees the
connection go and cancels the task, keeping what it computed in the slot for the next turn.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

from chatapp.engine import tokens as token_views
from chatapp.config import DraftMode, Settings
from chatapp.engine.inside.attention import AttentionUnavailable
from chatapp.engine.backend import CacheState, Drafting, GenerationSettings
from chatapp.engine.events import BackendEvent, Generated, Message, PrefillDone, PrefillProgress, TextDelta
from chatapp.engine.server.http import ServerClient, StreamBroken
from chatapp.engine.server.summary import SERVER_KIND, summarize, template_sha256
from chatapp.engine.server.vocabulary import ServerVocabulary
from chatapp.engine.stats import LiveDecode
from chatapp.engine.tokens import Token, common_prefix
from chatapp.errors import ServerError

SLOT = 0
"""The slot chatapp pins its conversation to (start the server with -np 1 to keep it alone)."""
SLOT_TIMEOUT = 600.0
"""Seconds a slot file save or restore may take (a long context on a slow disk)."""
RENDER_CACHE = 256
"""Rendered conversations kept: the token view renders every prefix of the chat each turn."""


class SlotFileError(OSError):
    """The slot could not be saved; sessions then say "KV state not saved (why)"."""


def sampling(generation: GenerationSettings) -> dict:
    """The in-process sampler chain, in llama-server's words: greedy at temperature 0 (the
    temperature sampler then keeps the first highest logit, as greedy does), else top-k,
    top-p, min-p (each keeping at least one token), temperature, then a seeded draw. Every
    other sampler and penalty is off."""
    greedy = generation.temperature <= 0
    return {
        "samplers": ["temperature"] if greedy else ["top_k", "top_p", "min_p", "temperature"],
        "temperature": max(generation.temperature, 0.0), "top_k": generation.top_k, "top_p": generation.top_p,
        "min_p": generation.min_p, "min_keep": 1, "seed": generation.seed if generation.seed >= 0 else -1,
        "dynatemp_range": 0.0, "typical_p": 1.0, "top_n_sigma": -1.0, "xtc_probability": 0.0, "mirostat": 0,
        "repeat_penalty": 1.0, "repeat_last_n": 0, "presence_penalty": 0.0, "frequency_penalty": 0.0,
        "dry_multiplier": 0.0, "n_probs": 0, "ignore_eos": False,
    }


@dataclass
class _Run:
    """What one /completion stream has said so far."""

    n_prompt: int
    reuse_broken_at: int | None
    cache: int = 0
    processed: int = 0
    progress_ms: float = 0.0
    progressed: bool = False
    prefill: PrefillDone | None = None
    predicted: int = 0
    timings: dict = field(default_factory=dict)
    segments: list[tuple[str, int | None, int]] = field(default_factory=list)
    """(text, last token id, tokens) per streamed piece of the reply."""
    final: dict | None = None

    def take(self, event: dict) -> Iterator[BackendEvent]:
        if "prompt_progress" in event:
            p = event["prompt_progress"]
            self.cache, self.processed, self.progress_ms = int(p["cache"]), int(p["processed"]), float(p["time_ms"])
            self.progressed = True
            yield PrefillProgress(self.processed - self.cache, int(p["total"]) - self.cache, self.progress_ms)
            return
        self.timings = event.get("timings") or self.timings
        if event.get("stop"):
            self.final = event
            return
        if self.prefill is None:
            self.prefill = self._prefill_done()
            yield self.prefill
        predicted = int(event.get("tokens_predicted", self.predicted + 1))
        tokens, text = event.get("tokens") or [None], str(event.get("content") or "")
        self.segments.append((text, tokens[-1], predicted - self.predicted))
        self.predicted = predicted
        if text:
            yield TextDelta(text, LiveDecode(max(predicted - 1, 0), float(self.timings.get("predicted_ms", 0.0)),
                                             self.n_prompt + predicted - 1))

    def _prefill_done(self) -> PrefillDone:
        t = self.timings
        if not t:  # stopped while the prompt was read: what the progress said
            return PrefillDone(self.n_prompt, self.cache, max(self.processed - self.cache, 0), self.progress_ms,
                               self.reuse_broken_at)
        return PrefillDone(self.n_prompt, int(t.get("cache_n", 0)), int(t.get("prompt_n", 0)),
                           float(t.get("prompt_ms", 0.0)), self.reuse_broken_at)


class ServerBackend:
    """`Backend` over a llama-server's HTTP API."""

    def __init__(self, client: ServerClient, props: dict, models: dict, slot_files: bool) -> None:
        self._client = client
        self.summary = summarize(client.url, props, models)
        self._props = props
        self._slot_files = slot_files
        """The server was started with --slot-save-path (slot files for sessions)."""
        self._vocab = ServerVocabulary(client)
        self.drafting = Drafting("off", Settings().draft_max)
        self._tokens: list[int] = []
        self._renders: dict[tuple, str] = {}
        bos = str(props.get("bos_token") or "")
        self._bos_text = bos
        bos_ids = self._vocab.tokenize(bos, special=True) if bos else []
        added = self._vocab.tokenize("", special=True, add_bos=True)
        self._adds_bos = bool(added) and len(bos_ids) == 1 and added[0] == bos_ids[0]

    @classmethod
    def connect(cls, url: str, api_key: str = "", waiting: Callable[[float], None] | None = None) -> "ServerBackend":
        """Reach the server, wait while it loads its model, and read what it runs."""
        client = ServerClient(url, api_key)
        try:
            client.wait_until_ready(waiting)
            props, models = client.get("/props"), client.get("/v1/models")
            if not isinstance(props, dict) or "default_generation_settings" not in props:
                raise ServerError(f"{client.url}/props is not llama-server's: is it a llama-server?")
            return cls(client, props, models if isinstance(models, dict) else {}, cls._probe_slot_files(client))
        except BaseException:
            client.close()
            raise

    @staticmethod
    def _probe_slot_files(client: ServerClient) -> bool:
        """Whether slot files work: an unknown action is refused as such (400) only when they do."""
        try:
            client.post(f"/slots/{SLOT}?action=chatapp-probe", {})
        except ServerError as exc:
            return "Invalid action" in str(exc)
        return True

    # --- template and tokens -------------------------------------------------------------
    def render(self, messages: Sequence[Message], *, add_generation_prompt: bool) -> str:
        """The server's /apply-template. A conversation that ends with a reply renders that reply
        open, as a continuation (llama-server's --prefill-assistant, on by default)."""
        key = (tuple((m.role, m.content) for m in messages), add_generation_prompt)
        text = self._renders.get(key)
        if text is None:
            data = self._client.post("/apply-template", {"messages": [m.as_template_input() for m in messages],
                                                          "add_generation_prompt": add_generation_prompt})
            text = str(data.get("prompt", ""))
            if len(self._renders) >= RENDER_CACHE:
                self._renders.pop(next(iter(self._renders)))
            self._renders[key] = text
        return text

    def tokenize_prompt(self, text: str) -> list[int]:
        add_bos = self._adds_bos and not (self._bos_text and text.startswith(self._bos_text))
        return self._vocab.tokenize(text, special=True, add_bos=add_bos)

    def tokenize(self, text: str) -> list[Token]:
        return token_views.tokenize_text(self._vocab, text)

    def describe(self, ids: Sequence[int]) -> list[Token]:
        ids = list(ids)
        self._vocab.classify(ids)
        return token_views.describe(self._vocab, ids)

    def cached_tokens(self) -> list[int]:
        return list(self._tokens)

    # --- a turn ----------------------------------------------------------------------------
    def set_drafting(self, mode: DraftMode, draft_max: int) -> Drafting:
        """chatapp's drafting runs in-process only: the server decodes as it was started."""
        why = "" if mode == "off" else ("chatapp drafts in-process only; a llama-server drafts only as it was "
                                        "started (with a draft model, -md)")
        self.drafting = Drafting(mode, draft_max, why)
        return self.drafting

    def interrupt(self) -> None:
        self._client.abort()

    def stream(self, prompt: Sequence[int], generation: GenerationSettings, stop: threading.Event, *,
               reuse_limit: int | None = None) -> Iterator[BackendEvent]:
        prompt = list(prompt)
        before = self._tokens
        shared = common_prefix(before, prompt)
        reuse_broken_at = shared if shared < len(before) and shared < len(prompt) - 1 else None
        run, error = _Run(len(prompt), reuse_broken_at), None
        body = {"prompt": prompt, "stream": True, "cache_prompt": True, "id_slot": SLOT,
                "n_predict": generation.max_tokens, "timings_per_token": True, "return_tokens": True,
                "return_progress": True, **sampling(generation)}
        try:
            if reuse_limit is not None and reuse_limit < min(shared, len(prompt) - 1):
                self._keep_only(prompt, reuse_limit)
            for event in self._client.stream("/completion", body, cancelled=stop.is_set):
                yield from run.take(event)
                if stop.is_set():
                    break
        except StreamBroken:
            if not stop.is_set():
                error = f"lost llama-server at {self.summary.server} mid-reply"
        except ServerError as exc:
            if not stop.is_set():
                error = str(exc)
        except KeyboardInterrupt:  # Ctrl+C in `chatapp ask`: a stop, as in-process
            stop.set()
        yield self._finish(run, prompt, min(shared, len(prompt) - 1), error)

    def _finish(self, run: _Run, prompt: list[int], reusable: int, error: str | None) -> Generated:
        generated, _exact = self._generated_ids(run.segments)
        final = run.final
        eos = final is not None and final.get("stop_type") == "eos"
        if final is not None:
            finish = "stop" if final.get("stop_type") in ("eos", "word") else (
                "context" if final.get("truncated") else "length")
            held = (prompt + generated)[: int(final.get("tokens_cached", len(prompt) + len(generated)))]
        elif run.segments:  # stopped mid-reply: the last token may not be in the cache yet
            finish, held = "stopped", prompt + generated[:-1]
        else:  # stopped before the first token: the prompt as far as the server had read it
            finish, held = "stopped", prompt[: run.processed if run.progressed else reusable]
        self._tokens = held
        texts = [text for text, _, _ in run.segments]
        if eos and texts:
            texts.pop()  # the end-of-turn token's text (a server started with --special sends it)
        extra: dict = {"server_timings": dict(run.timings)}
        if error is not None:
            extra["server_error"] = f"{error}; the partial reply is kept" if run.segments else error
        predicted = run.predicted
        return Generated(
            finish, "".join(texts), max(predicted - (1 if eos else 0), 0), max(predicted - 1, 0),
            float(run.timings.get("predicted_ms", 0.0)) if predicted else 0.0,
            int(final.get("tokens_cached", len(held))) if final is not None else len(held),
            run._prefill_done() if final is not None or run.prefill is None else run.prefill, extra)

    def _generated_ids(self, segments: list[tuple[str, int | None, int]]) -> tuple[list[int], bool]:
        """The reply's token ids, and whether all of them are known (see the module's docstring)."""
        ids: list[int] = []
        for text, last, count in segments:
            if last is None or count < 1:
                return ids, False
            if count == 1:
                ids.append(last)
                if text:
                    self._vocab.learn(last, text.encode("utf-8"))
                continue
            try:
                found = self._vocab.tokenize(text, special=False)
            except ServerError:
                return ids, False
            if len(found) != count or found[-1] != last:
                return ids, False
            ids.extend(found)
        return ids, True

    def _keep_only(self, prompt: list[int], keep: int) -> None:
        """Make the slot hold exactly prompt[:keep] in front, so the rest is prefilled as one
        batch again (regenerate repeats a greedy reply): one token that differs from
        prompt[keep] is evaluated after the kept part, or the slot is erased for keep 0."""
        if keep == 0 and self._slot_files:
            self._client.post(f"/slots/{SLOT}?action=erase", {}, timeout=SLOT_TIMEOUT)
            self._tokens = []
            return
        other = prompt[keep] - 1 if prompt[keep] > 0 else 1
        self._client.post("/completion", {"prompt": prompt[:keep] + [other], "n_predict": 0, "cache_prompt": True,
                                          "id_slot": SLOT, **sampling(GenerationSettings(temperature=0.0))})
        self._tokens = prompt[:keep] + [other]

    # --- the cache ---------------------------------------------------------------------------
    def clear_cache(self) -> None:
        """Erase the slot (needs --slot-save-path); without slot actions the server keeps what it
        has, and a later turn's record says how much of it the server really reused."""
        if self._slot_files:
            self._client.post(f"/slots/{SLOT}?action=erase", {}, timeout=SLOT_TIMEOUT)
        self._tokens = []

    def fingerprint(self) -> dict[str, str | int | bool]:
        """The server, its model (path and tensor bytes), context, chat template and build."""
        s = self.summary
        return {
            "backend": SERVER_KIND,
            "model_id": f"{s.path}#{s.size_bytes or 0}",
            "model": s.name,
            "quant": s.quant or "",
            "n_ctx": s.n_ctx,
            "template_sha256": template_sha256(self._props),
            "server_build": s.build,
        }

    def save_cache(self, key: str) -> CacheState:
        """The slot saved as a file on the server's side (its --slot-save-path), named after
        the session's state key; chatapp keeps the name and the token count."""
        if not self._slot_files:
            raise SlotFileError(f"llama-server at {self.summary.server} has no --slot-save-path")
        name = f"chatapp-{key}.bin"
        try:
            data = self._client.post(f"/slots/{SLOT}?action=save", {"filename": name}, timeout=SLOT_TIMEOUT)
        except ServerError as exc:
            raise SlotFileError(str(exc)) from None
        saved = int(data.get("n_saved", -1))
        if saved < len(self._tokens):
            raise SlotFileError(f"the server's slot holds {saved:,} tokens, not the {len(self._tokens):,} "
                                "of this chat (another client used it?)")
        return CacheState(list(self._tokens), b"", {"slot_file": name, "slot_tokens": saved})

    def restore_cache(self, state: CacheState, keep: int) -> bool:
        name, expected = state.meta.get("slot_file"), state.meta.get("slot_tokens")
        self._tokens = []
        if not self._slot_files or not isinstance(name, str) or not name or not isinstance(expected, int):
            return False
        try:
            data = self._client.post(f"/slots/{SLOT}?action=restore", {"filename": name}, timeout=SLOT_TIMEOUT)
        except ServerError:
            return False  # the server leaves the slot empty when a restore fails
        if int(data.get("n_restored", -1)) != expected or len(state.tokens) > expected:
            self.clear_cache()
            return False
        self._tokens = list(state.tokens[:keep])
        return True

    def attention(self, tokens: Sequence[int], reply_start: int, head_layer: int | None,
                  stop: threading.Event) -> AttentionUnavailable:
        return AttentionUnavailable("llama-server does not expose attention weights: its API returns tokens, "
                                    "text and probabilities, not the model's internals")

    def close(self) -> None:
        self._client.close()
