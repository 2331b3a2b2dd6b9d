"""The boundary under `Engine`: a typed, turn-level `Backend` protocol, and what crosses it.

A backend runs one model and owns its KV cache; it does not know the conversation. The
engine renders the conversation through the backend's chat template, decides what fits, and
asks the backend to stream one turn from a list of prompt token ids. Two backends implement
this: llama.cpp in-process (`chatapp.engine.local.backend`) and llama.cpp's `llama-server` over HTTP
(`chatapp.engine.server.backend`); the UI's scripted test backend does too.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol, get_args, runtime_checkable

from chatapp.config import DraftMode, Settings
from chatapp.engine.inside.attention import AttentionMap, AttentionUnavailable
from chatapp.engine.events import BackendEvent, Message
from chatapp.engine.images import ImageFacts
from chatapp.engine.sampling import Scored
from chatapp.engine.shape import ReplyShape
from chatapp.engine.thinking import Steering
from chatapp.engine.tokens import Token
from chatapp.engine.tools.grammar import CallGrammar

BackendKind = Literal["in-process", "llama-server"]
BACKEND_KINDS: tuple[str, ...] = get_args(BackendKind)

_DEFAULTS = Settings()


TILE_ROWS = 64
"""llama.cpp's CPU flash attention computes a batch of this many rows or more (GGML_FA_TILE_Q)
another way than a smaller batch: tiled, as matrix products, where a small batch takes one row at
a time. A token's keys and values then differ in their last bits, and so can a greedy reply.
Within each way a row comes out the same whatever batch it is in (measured on the default
model: batches of 64, 128 and 256 agree bit for bit, and so do 8 to 63)."""
TAIL_MARGIN = 24
"""The fewest prompt tokens, at its end, that a turn prefills in small batches (below
TILE_ROWS): the last tokens of a question being typed, which may still change, are among them."""
SMALL_MIN = 8
"""The fewest tokens a small batch that redoes a prompt's end computes: never one token (a
single-token batch takes the decode path, another way again)."""
PREFILL_CHUNK = 256
"""The most prompt tokens per prefill batch."""


def split_evenly(n: int, most: int) -> list[int]:
    """n tokens in as few batches of at most `most` as will do, as even as can be."""
    if n <= 0:
        return []
    k = -(-n // most)
    return [n // k + (1 if i < n % k else 0) for i in range(k)]


def tiled_end(origin: int, end: int) -> int:
    """Where the batches of TILE_ROWS or more end when prefill of a prompt of `end` tokens
    starts at `origin`: a whole number of TILE_ROWS after it, at least TAIL_MARGIN before the end."""
    return origin + TILE_ROWS * (max(0, end - origin - TAIL_MARGIN) // TILE_ROWS)


def prefill_batches(start: int, end: int) -> list[int]:
    """The sizes of the batches that prefill positions start..end (the prompt's end) in: up to
    `tiled_end` in batches of TILE_ROWS or more (up to PREFILL_CHUNK), the rest in small ones.
    So a position's keys and values depend only on where a plain turn's prefill would start.
    Prefill that starts later (prefill while typing, chatapp.engine.chat.typeahead) keeps to
    the same rule: a turn's `reuse_limit` makes it start where the batches agree."""
    tiled = tiled_end(start, end)
    return split_evenly(tiled - start, PREFILL_CHUNK) + split_evenly(end - tiled, TILE_ROWS - 1)


@dataclass(frozen=True)
class GenerationSettings:
    """Sampling for one turn. Defaults come from `Settings`, the one place they are written."""

    temperature: float = _DEFAULTS.temperature
    top_k: int = _DEFAULTS.top_k
    top_p: float = _DEFAULTS.top_p
    min_p: float = _DEFAULTS.min_p
    max_tokens: int = _DEFAULTS.max_tokens
    seed: int = _DEFAULTS.seed
    stream_timeout: float = _DEFAULTS.stream_timeout
    """Seconds a reply may go without progress; a backend that streams over a network (the
    llama-server one) gives up past it. In-process decoding cannot stall, so it ignores it."""
    logprobs: int = 0
    """Candidates to report per generated token (chatapp.engine.sampling, up to MAX_LOGPROBS);
    0 computes nothing extra."""
    grammar: CallGrammar | None = None
    """The reply must be this tool call (chatapp.engine.tools.grammar); None: free text."""
    shape: ReplyShape | None = None
    """The shape every reply must have (ask --schema/--grammar); a tool call's grammar comes first."""

    grammar_mask: bool = False
    """Count, per token sampled under a grammar, the vocabulary entries it allows and the
    probability it cuts: every token is then checked against it, not only the one drawn (slower)."""

    @property
    def reply_grammar(self) -> CallGrammar | None:
        """The grammar the backend samples under: the tool call's, else the shape's, else none."""
        if self.grammar is not None or self.shape is None:
            return self.grammar
        return CallGrammar(self.shape.schema or {}, gbnf=self.shape.gbnf)

    @classmethod
    def from_settings(cls, settings: Settings) -> "GenerationSettings":
        return cls(temperature=settings.temperature, top_k=settings.top_k, top_p=settings.top_p,
                   min_p=settings.min_p, max_tokens=settings.max_tokens, seed=settings.seed,
                   stream_timeout=settings.stream_timeout)


NOT_REPORTED = "not reported by the server"
"""How the UI names a figure a backend cannot give (None in a ModelSummary)."""


@dataclass(frozen=True)
class ModelSummary:
    """What is loaded and where. None means the backend cannot tell (never a guess)."""

    name: str
    path: str
    """The model file as the backend names it (a local path, or the server's path)."""
    kind: BackendKind
    backend: str
    """Where the maths runs: CPU, CUDA, Metal... for in-process; "llama-server" for a server."""
    location: str
    """"in-process", or "llama-server URL"."""
    build: str
    """The llama.cpp build."""
    n_ctx: int
    quant: str | None = None
    kv_type: str | None = None
    kv_bytes_per_token: int | None = None
    threads: int | None = None
    layers_offloaded: int | None = None
    n_layer: int | None = None
    n_params: int | None = None
    size_bytes: int | None = None
    flash_attn: bool | None = None
    local_file: str | None = None
    """A readable copy of the model file on this machine, for the GGUF scans (Quant panel)."""
    server: str | None = None
    """The llama-server's URL (no credentials in it); None in-process."""
    base_model: str | None = None
    """Why it is a base model (chatapp.engine.models.base_model), None for a chat model or when
    the backend cannot tell."""
    projector: str | None = None
    """What the model sees through its projector, in one line ("sees images through mmproj-….gguf
    (projector mlp, 16 tokens per image)"); None: it reads text only, or the backend cannot tell."""


@dataclass(frozen=True)
class CacheState:
    """A backend's KV cache as saved: the token ids it holds, and either the bytes of the
    state (in-process) or where the backend keeps them (`meta`, e.g. a server's slot file)."""

    tokens: list[int]
    payload: bytes | memoryview = b""
    meta: dict[str, str | int | bool] = field(default_factory=dict)


@dataclass(frozen=True)
class Drafting:
    """Speculative decoding as a backend will run it from the next turn."""

    mode: DraftMode
    """What was asked for."""
    draft_max: int
    off_because: str = ""
    """Why replies will not be drafted although `mode` asks for it, in one line ("" otherwise)."""

    @property
    def active(self) -> bool:
        return self.mode != "off" and not self.off_because

    def describe(self) -> str:
        """One line, e.g. "drafting on: prompt lookup, up to 8 tokens a step"."""
        if self.active:
            n = self.draft_max
            return f"drafting on: prompt lookup, up to {n} token{'s' if n != 1 else ''} a step"
        return f"drafting off: {self.off_because}" if self.mode != "off" else "drafting off"


@runtime_checkable
class Backend(Protocol):
    summary: ModelSummary
    drafting: Drafting
    """Speculative decoding as the next turn will run it (see set_drafting)."""

    def render(self, messages: Sequence[Message], *, add_generation_prompt: bool,
               tools: Sequence[dict] | None = None, switches: Mapping[str, bool] | None = None) -> str:
        """The conversation through the model's own chat template; `tools` (OpenAI-style function
        entries) go to a template that reads them, and one that does not leaves them out.
        `switches`: the template's own flags, as llama-server's `chat_template_kwargs` takes them
        (Qwen3's `enable_thinking`); a template that does not read one renders as without it."""

    def tokenize_prompt(self, text: str, images: Sequence[str] = ()) -> list[int]:
        """Templated text as the model reads it: special tokens parsed, BOS as the model wants.
        `images`: the hashes of the images (each given to `add_image`) whose media markers
        (chatapp.engine.images.MEDIA_MARKER) the text holds, in order: each becomes its cells."""

    def add_image(self, data: bytes, name: str) -> ImageFacts:
        """Read an image for the prompts to come (not encoded yet: a turn that needs its cells
        encodes it, once). AttachmentError says in one line why not: the model sees no images,
        the file is no image libmtmd reads."""

    def tokenize(self, text: str) -> list[Token]:
        """Plain text (a user's) cut by the model's tokenizer, with pieces that join back into it."""

    def describe(self, ids: Sequence[int]) -> list[Token]:
        """Pieces of these ids, special tokens marked."""

    def cached_tokens(self) -> list[int]:
        """The token ids whose keys and values the cache holds now, in position order."""

    def stream(self, prompt: Sequence[int], generation: GenerationSettings, stop: threading.Event, *,
               reuse_limit: int | None = None, forced: Sequence[int] = (),
               steer: Steering | None = None) -> Iterator[BackendEvent]:
        """Run one turn: reuse what the cache shares with `prompt` (at most `reuse_limit`
        tokens), prefill the rest, decode the reply. Ends with a `Generated`. `stop` may be set
        from another thread at any time, prefill included.

        `forced`: the reply's first tokens, given rather than sampled (a branch from a token of
        an earlier reply). They follow `prompt` in the cache like prompt tokens, the cached ones
        reused and the rest prefilled, their text starts the reply, and decoding goes on after
        them. `Generated.forced_prefilled` says how many of them were computed.

        `steer`: a thinking model's turn (chatapp.engine.thinking.Steering): the backend feeds it
        each token's text and forces the thought's close when it says so (a budget run out,
        "answer now"), or says in the record's extra that it cannot."""

    def interrupt(self) -> None:
        """Called from another thread after `stop` is set, to cut a blocking call short."""

    def prefill(self, tokens: Sequence[int], stop: threading.Event, *, batch: int) -> Iterator[int]:
        """Make the cache hold `tokens` from position 0: keep what it shares with them, drop the
        rest (a server's slot drops it at its next request), and compute the others in as few
        batches of at most `batch` tokens as will do, as even as can be (`split_evenly`).
        Yields the tokens cached after each batch. `stop` may be
        set from another thread at any time: what is cached then is still a prefix of `tokens`
        (prefill while typing, chatapp.engine.chat.typeahead). It may also stop short unasked,
        leaving a shorter prefix: an in-process backend gives way while other programs keep
        every core busy, since typing ahead must never slow them or the UI."""

    def set_drafting(self, mode: DraftMode, draft_max: int) -> Drafting:
        """Speculative decoding from the next turn on. A backend that cannot draft says why in
        the result's `off_because` rather than ignore the request."""

    def clear_cache(self) -> None: ...

    def fingerprint(self) -> dict[str, str | int | bool]:
        """What must match for a saved cache to load here again, checked in this order."""

    def save_cache(self, key: str) -> CacheState:
        """The cache as it is now, to be kept under `key` (a session's state key)."""

    def restore_cache(self, state: CacheState, keep: int) -> bool:
        """Load a saved cache and keep its first `keep` tokens; False leaves the cache empty."""

    def keep_cache_prefix(self, n: int) -> None:
        """Forget every cached cell from position `n` on."""

    def attention(self, tokens: Sequence[int], reply_start: int, head_layer: int | None,
                  stop: threading.Event) -> AttentionMap | AttentionUnavailable:
        """llama.cpp's attention weights for the reply positions (reply_start on) of `tokens`, a
        turn's cache, read without touching the cache or the decode path (chatapp.engine.inside.attention);
        or why they cannot be had here. `head_layer`: the layer whose heads are kept one by one."""

    def score(self, prompt: Sequence[int], reply: Sequence[int], generation: GenerationSettings, n_top: int,
              stop: threading.Event) -> Scored:
        """`reply`'s tokens after `prompt` (a reply written without probabilities) with the
        probabilities they had there and `n_top` candidates each, from one prefill pass over them
        (the cache's shared prefix reused; it ends holding both); InputError says in one line
        why not (a backend that reports probabilities only for tokens it samples)."""

    def close(self) -> None: ...
