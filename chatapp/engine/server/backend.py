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

The server is not trusted to keep the turn's bounds (chatapp.engine.server.reply): a reply
past them is cut off with one line, the reply so far kept.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import closing
from dataclasses import replace

import msgspec

from chatapp.engine import tokens as token_views
from chatapp.config import DraftMode, Settings
from chatapp.engine.inside.attention import AttentionUnavailable
from chatapp.engine.backend import CacheState, Drafting, GenerationSettings, split_evenly
from chatapp.engine.events import BackendEvent, Generated, Message, PrefillDone, TextDelta
from chatapp.engine.sampling import Scored
from chatapp.engine.stats import LiveDecode
from chatapp.engine.thinking import Steering
from chatapp.engine.server import answers, probs
from chatapp.engine.server.http import ServerClient, StreamBroken, Timeouts
from chatapp.engine.server.reply import ReplyRun
from chatapp.engine.server.summary import SERVER_KIND, summarize, template_sha256
from chatapp.engine.server.vocabulary import ServerVocabulary
from chatapp.engine.tokens import Token, common_prefix
from chatapp.engine.tools.grammar import CallGrammar
from chatapp.engine.images import ImageFacts
from chatapp.errors import AttachmentError, ContextFullError, InputError, ModelError, ServerError

SLOT = 0
"""The slot chatapp pins its conversation to (start the server with -np 1 to keep it alone)."""
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
        "dry_multiplier": 0.0, "n_probs": probs.n_probs(generation), "post_sampling_probs": False,
        "ignore_eos": False,
    }


GRAMMAR_NOT_REPORTED = ("llama-server reports neither its grammar's time (it is inside its sampling) nor the "
                        "grammar's mask per token")


def call_grammar(grammar: CallGrammar | None) -> dict:
    """A tool call's grammar (chatapp.engine.tools.grammar) in llama-server's words: its JSON
    schema, which the server turns into a grammar itself. The markers a call is wrapped in
    (`<tool_call>`, `[TOOL_CALLS]`) have no room in a schema: `stream` forces the opening one as
    the reply's first tokens and writes the closing one after the call (see there). GBNF text
    (ask --grammar) goes as the server's `grammar`."""
    if grammar is None:
        return {}
    return {"grammar": grammar.gbnf} if grammar.gbnf else {"json_schema": grammar.schema}


IMAGES_NOT_SENT = ("images are not sent to a llama-server yet: chat about an image in-process "
                   "(without --server), with the model's mmproj")


class ServerBackend:
    """`Backend` over a llama-server's HTTP API."""

    def __init__(self, client: ServerClient, props: answers.Props, models: answers.Models, slot_files: bool) -> None:
        self._client = client
        self.summary = summarize(client.url, props, models)
        self._props = props
        self._slot_files = slot_files
        """The server was started with --slot-save-path (slot files for sessions)."""
        self._vocab = ServerVocabulary(client)
        self.drafting = Drafting("off", Settings().draft_max)
        self._tokens: list[int] = []
        self._streaming: tuple[list[int], ReplyRun] | None = None
        """The prompt and the reply run while a reply streams (see cached_tokens)."""
        self._renders: dict[tuple, str] = {}
        self._refuses_tools = False
        """The server was started with --no-jinja: its template takes no tools (see render)."""
        bos = props.bos_token
        self._bos_text = bos
        bos_ids = self._vocab.tokenize(bos, special=True) if bos else []
        added = self._vocab.tokenize("", special=True, add_bos=True)
        self._adds_bos = bool(added) and len(bos_ids) == 1 and added[0] == bos_ids[0]

    @classmethod
    def connect(cls, url: str, api_key: str = "", waiting: Callable[[float], None] | None = None,
                timeouts: Timeouts = Timeouts()) -> "ServerBackend":
        """Reach the server, wait while it loads its model, and read what it runs."""
        client = ServerClient(url, api_key, timeouts)
        try:
            client.wait_until_ready(waiting)
            props, models = client.get("/props", answers.Props), client.get("/v1/models", answers.Models)
            return cls(client, props, models, cls._probe_slot_files(client))
        except BaseException:
            client.close()
            raise

    @staticmethod
    def _probe_slot_files(client: ServerClient) -> bool:
        """Whether slot files work: an unknown action is refused as such (400) only when they do."""
        try:
            client.post(f"/slots/{SLOT}?action=chatapp-probe", {}, answers.Anything)
        except answers.WrongAnswer:
            raise
        except ServerError as exc:
            return "Invalid action" in str(exc)
        return True

    # --- template and tokens -------------------------------------------------------------
    def render(self, messages: Sequence[Message], *, add_generation_prompt: bool,
               tools: Sequence[dict] | None = None, switches: Mapping[str, bool] | None = None) -> str:
        """The server's /apply-template. A conversation that ends with a reply renders that reply
        open, as a continuation (llama-server's --prefill-assistant, on by default). A server
        started with --no-jinja refuses `tools` ("tools param requires --jinja flag"): its
        template does not read them, so they are left out, as the protocol says, and chatapp
        lists them the generic way (chatapp.engine.chat.tool_prompt)."""
        if tools and self._refuses_tools:
            tools = None
        key = (tuple((m.role, m.content) for m in messages), add_generation_prompt,
               msgspec.json.encode(list(tools or ())), tuple(sorted((switches or {}).items())))
        text = self._renders.get(key)
        if text is None:
            try:
                text = self._client.post("/apply-template", {"messages": [m.as_template_input() for m in messages],
                                                              "add_generation_prompt": add_generation_prompt,
                                                              **({"tools": list(tools)} if tools else {}),
                                                              **({"chat_template_kwargs": dict(switches)}
                                                                 if switches else {})},
                                         answers.Rendered).prompt
            except ServerError as exc:
                if (refused := template_refusal(str(exc))) is not None:
                    raise refused from None
                if not tools or "--jinja" not in str(exc):
                    raise
                self._refuses_tools = True
                return self.render(messages, add_generation_prompt=add_generation_prompt, switches=switches)
            if len(self._renders) >= RENDER_CACHE:
                self._renders.pop(next(iter(self._renders)))
            self._renders[key] = text
        return text

    def tokenize_prompt(self, text: str, images: Sequence[str] = ()) -> list[int]:
        if images:
            raise AttachmentError(IMAGES_NOT_SENT)
        add_bos = self._adds_bos and not (self._bos_text and text.startswith(self._bos_text))
        return self._vocab.tokenize(text, special=True, add_bos=add_bos)

    def add_image(self, data: bytes, name: str) -> ImageFacts:
        raise AttachmentError(IMAGES_NOT_SENT)

    def tokenize(self, text: str) -> list[Token]:
        return token_views.tokenize_text(self._vocab, text)

    def describe(self, ids: Sequence[int]) -> list[Token]:
        ids = list(ids)
        self._vocab.classify(ids)
        return token_views.describe(self._vocab, ids)

    def cached_tokens(self) -> list[int]:
        """What the slot holds: mid-reply, the prompt and the reply's ids as far as the stream
        has named them one by one (a segment of several ids, a split character, ends that)."""
        if self._streaming is not None:
            prompt, run = self._streaming
            ids = list(prompt)
            for _text, last, count in run.segments:
                if last is None or count != 1:
                    break
                ids.append(last)
            return ids
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
               reuse_limit: int | None = None, forced: Sequence[int] = (),
               steer: Steering | None = None) -> Iterator[BackendEvent]:
        """`steer`: the server decodes a reply in one request, so a thinking budget and "answer
        now" are not enforced here (the record says so); the engine still splits the thought.

        A call grammar with markers: the opening marker is forced (prefilled as the reply's start,
        as chatapp's local GBNF would make the model write it), the server keeps the JSON to the
        schema, and the closing marker, which the finished schema leaves no room for, is added to
        the reply's text (the next turn renders the call through the template anyway)."""
        grammar = generation.reply_grammar
        forced = list(forced) + (self._vocab.tokenize(grammar.prefix, special=True, add_bos=False)  # mid-prompt: no BOS
                                 if grammar and grammar.prefix else [])
        n_prompt = len(prompt)
        prompt = list(prompt) + forced  # forced reply tokens go in as the prompt's tail
        before = self._tokens
        shared = common_prefix(before, prompt)
        reuse_broken_at = shared if shared < len(before) and shared < len(prompt) - 1 else None
        run = ReplyRun(len(prompt), reuse_broken_at, generation.max_tokens, self.summary.n_ctx,
                       f"llama-server at {self.summary.server}")
        error = None
        body = {"prompt": prompt, "stream": True, "cache_prompt": True, "id_slot": SLOT,
                "n_predict": generation.max_tokens, "timings_per_token": True, "return_tokens": True,
                "return_progress": True, **sampling(generation)}
        body.update(call_grammar(grammar))
        forced_text = self._forced_text(forced)
        try:
            if reuse_limit is not None and reuse_limit < min(shared, len(prompt) - 1):
                self._keep_only(prompt, reuse_limit, generation.stream_timeout)
            # closing: a turn cut off here (a stop, a server past its bounds) drops the connection
            # at once, which tells the server to cancel the task.
            self._streaming = (prompt, run)
            with closing(self._client.stream("/completion", body, generation.stream_timeout,
                                             cancelled=stop.is_set)) as events:
                for event in events:
                    for said in run.take(event):
                        if forced_text and isinstance(said, PrefillDone):
                            yield said
                            said = TextDelta(forced_text, LiveDecode(0, 0.0, len(prompt)))
                        yield said
                    if stop.is_set():
                        break
            if run.final is None and not stop.is_set():
                error = f"llama-server at {self.summary.server} ended the reply without its last event"
        except StreamBroken:
            if not stop.is_set():
                error = f"lost llama-server at {self.summary.server} mid-reply"
        except ContextFullError:
            if not run.segments:
                raise  # the turn never started: the engine refuses it
            error = f"llama-server at {self.summary.server} said its context was full mid-reply"
        except ServerError as exc:
            if not stop.is_set():
                error = str(exc)
        except KeyboardInterrupt:  # Ctrl+C in `chatapp ask`: a stop, as in-process
            stop.set()
        finally:
            self._streaming = None
        finished = self._finish(run, prompt, min(shared, len(prompt) - 1), error, generation)
        if steer is not None and steer.budget is not None:
            finished.extra["think_budget"] = "not enforced by llama-server"
        if generation.shape is not None:  # the server samples under it, and tells nothing of it
            finished.extra.update(grammar_ms=None, grammar_ms_per_token=None,
                                  grammar_not_reported=GRAMMAR_NOT_REPORTED)
        if forced:
            cached = finished.prefill.cached_tokens if finished.prefill is not None else 0
            finished = replace(finished, reply=forced_text + finished.reply, forced=len(forced),
                               forced_prefilled=len(forced) - max(0, cached - n_prompt))
        if grammar and grammar.suffix and finished.finish_reason == "stop" and not finished.reply.rstrip().endswith(
                grammar.suffix.strip()):
            finished = replace(finished, reply=finished.reply + grammar.suffix)
        yield finished

    def _forced_text(self, forced: list[int]) -> str:
        return b"".join(t.raw for t in self.describe(forced) if not t.special).decode("utf-8", "replace") \
            if forced else ""

    def _finish(self, run: ReplyRun, prompt: list[int], reusable: int, error: str | None,
                generation: GenerationSettings) -> Generated:
        generated, _exact = self._generated_ids(run.segments)
        final = run.final
        eos = final is not None and final.stop_type == "eos"
        if final is not None:
            finish = "stop" if final.stop_type in ("eos", "word") else "context" if final.truncated else "length"
            cached = final.tokens_cached if final.tokens_cached is not None else len(prompt) + len(generated)
            held = (prompt + generated)[:cached]
        elif run.segments:  # stopped mid-reply: the last token may not be in the cache yet
            finish, held = "stopped", prompt + generated[:-1]
        else:  # stopped before the first token: the prompt as far as the server had read it
            finish, held = "stopped", prompt[: run.processed if run.progressed else reusable]
        self._tokens = held
        texts = [text for text, _, _ in run.segments]
        if eos and texts:
            texts.pop()  # the end-of-turn token's text (a server started with --special sends it)
        extra: dict = {"server_timings": msgspec.structs.asdict(run.timings) if run.reported_timings else {}}
        if error is not None:
            extra["server_error"] = f"{error}; the partial reply is kept" if run.segments else error
        predicted = run.predicted
        n_generated = max(predicted - (1 if eos else 0), 0)
        return Generated(
            finish, "".join(texts), n_generated, max(predicted - 1, 0),
            run.timings.predicted_ms if predicted else 0.0,
            final.tokens_cached if final is not None and final.tokens_cached is not None else len(held),
            run.prefill_done() if final is not None or run.prefill is None else run.prefill, extra,
            probs=tuple(probs.token_probs(entry, generation, generation.logprobs)
                        for entry in run.probabilities[:n_generated]))

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

    def prefill(self, tokens: Sequence[int], stop: threading.Event, *, batch: int) -> Iterator[int]:
        """Prefill while typing through the server's prompt cache: each batch is a /completion
        of the prompt so far with n_predict 0 and cache_prompt, which the server answers after
        computing what its slot lacks; the turn's request then finds it there. What the slot
        holds past `tokens` is replaced by the next request that differs there."""
        tokens = list(tokens)
        done = common_prefix(self._tokens, tokens)
        greedy = sampling(GenerationSettings(temperature=0.0))
        for size in split_evenly(len(tokens) - done, batch):
            if stop.is_set():
                return
            end = done + size
            self._client.post("/completion", {"prompt": tokens[:end], "n_predict": 0, "cache_prompt": True,
                                              "id_slot": SLOT, **greedy},
                              answers.Anything, timeout=self._client.timeouts.slot)
            self._tokens = tokens[:end]
            done = end
            yield done

    def _keep_only(self, prompt: list[int], keep: int, timeout: float) -> None:
        """Make the slot hold exactly prompt[:keep] in front, so the rest is prefilled as one
        batch again (regenerate repeats a greedy reply): one token that differs from
        prompt[keep] is evaluated after the kept part, or the slot is erased for keep 0."""
        if keep == 0 and self._slot_files:
            self._client.post(f"/slots/{SLOT}?action=erase", {}, answers.Anything, timeout=self._client.timeouts.slot)
            self._tokens = []
            return
        other = prompt[keep] - 1 if prompt[keep] > 0 else 1
        # It may have to evaluate what the slot lost: as long as a reply may stall, not a request.
        self._client.post("/completion", {"prompt": prompt[:keep] + [other], "n_predict": 0, "cache_prompt": True,
                                          "id_slot": SLOT, **sampling(GenerationSettings(temperature=0.0))},
                          answers.Anything, timeout=timeout)
        self._tokens = prompt[:keep] + [other]

    # --- the cache ---------------------------------------------------------------------------
    def clear_cache(self) -> None:
        """Erase the slot (needs --slot-save-path); without slot actions the server keeps what it
        has, and a later turn's record says how much of it the server really reused."""
        if self._slot_files:
            self._client.post(f"/slots/{SLOT}?action=erase", {}, answers.Anything, timeout=self._client.timeouts.slot)
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
            saved = self._client.post(f"/slots/{SLOT}?action=save", {"filename": name}, answers.SlotSaved,
                                      timeout=self._client.timeouts.slot).n_saved
        except answers.WrongAnswer:
            raise  # not a llama-server: not a file that could not be written
        except ServerError as exc:
            raise SlotFileError(str(exc)) from None
        if saved < len(self._tokens):
            raise SlotFileError(f"the server's slot holds {saved:,} tokens, not the {len(self._tokens):,} "
                                "of this chat (another client used it?)")
        return CacheState(list(self._tokens), b"", {"slot_file": name, "slot_tokens": saved})

    def keep_cache_prefix(self, n: int) -> None:
        """Make the slot hold its first `n` cells and nothing after them, so a slot file saved
        next holds no more (no text prefilled while typing): a /completion of those tokens with
        n_predict 0, for which the server keeps the prefix it holds of them, drops the cells past
        it and evaluates the last token again; for 0 the slot is erased."""
        n = max(0, n)
        if n >= len(self._tokens):
            return
        if n == 0:
            self.clear_cache()
            return
        self._client.post("/completion", {"prompt": self._tokens[:n], "n_predict": 0, "cache_prompt": True,
                                          "id_slot": SLOT, **sampling(GenerationSettings(temperature=0.0))},
                          answers.Anything, timeout=self._client.timeouts.slot)
        self._tokens = self._tokens[:n]

    def restore_cache(self, state: CacheState, keep: int) -> bool:
        name, expected = state.meta.get("slot_file"), state.meta.get("slot_tokens")
        self._tokens = []
        if not self._slot_files or not isinstance(name, str) or not name or not isinstance(expected, int):
            return False
        try:
            restored = self._client.post(f"/slots/{SLOT}?action=restore", {"filename": name}, answers.SlotRestored,
                                         timeout=self._client.timeouts.slot).n_restored
        except answers.WrongAnswer:
            raise
        except ServerError:
            return False  # refused or timed out: the server leaves the slot empty when a restore fails
        if restored != expected or len(state.tokens) > expected:
            self.clear_cache()
            return False
        self._tokens = list(state.tokens[:keep])
        return True

    def attention(self, tokens: Sequence[int], reply_start: int, head_layer: int | None,
                  stop: threading.Event) -> AttentionUnavailable:
        return AttentionUnavailable("llama-server does not expose attention weights: its API returns tokens, "
                                    "text and probabilities, not the model's internals")

    def score(self, prompt: Sequence[int], reply: Sequence[int], generation: GenerationSettings, n_top: int,
              stop: threading.Event) -> Scored:
        raise InputError("llama-server reports probabilities only for the tokens it samples, not for a reply "
                         "read back: scoring a reply needs the in-process backend")

    def close(self) -> None:
        self._client.close()


def template_refusal(said: str) -> ModelError | None:
    """The server's template refusing a conversation (its `raise_exception`, which llama-server
    answers with HTTP 500 and "Jinja Exception: ..."), as the ModelError the in-process template
    raises, so chatapp's fallbacks for a refused side render (chatapp.engine.chat.userless) serve
    both backends alike: Qwen3.5's "No user query found" refused a system-only render over
    --server, and with it the first turn. None for any other error."""
    found = re.search(r"Jinja Exception: (.+?)(?: \(HTTP \d+|$)", said)
    if found is None:
        return None
    where = re.search(r"at line (\d+)", said)
    return ModelError(f"the server's chat template refused the conversation: {found.group(1).strip()}"
                      + (f" (raise_exception at its line {where.group(1)})" if where else ""))
