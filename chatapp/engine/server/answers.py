"""Every answer a llama-server gives, as typed structures: the one place its JSON is read.

Whatever is on the other end of the URL may send anything. msgspec decodes each answer
straight into these structures and checks every type and range on the way (an id is a
token id, a piece's bytes are bytes, a count is not negative), so the code after it reads
fields it can trust, and an answer of the wrong shape becomes one line naming the field:
"<url>/tokenize did not answer as a llama-server: tokens[0].id: expected `int`, got `str`".

Fields chatapp does not use are ignored, so another llama.cpp build's additions pass; the
ones it uses are required unless llama-server itself leaves them out at times.
"""

from __future__ import annotations

import re
from typing import Annotated, TypeVar

import msgspec

from chatapp.errors import ServerError
from chatapp.format import one_line_text

TokenId = Annotated[int, msgspec.Meta(ge=0, le=2**31 - 1)]
"""llama.cpp's llama_token is an int32, and no id is negative."""
Count = Annotated[int, msgspec.Meta(ge=0, le=2**31 - 1)]
Positive = Annotated[int, msgspec.Meta(gt=0, le=2**31 - 1)]
Byte = Annotated[int, msgspec.Meta(ge=0, le=255)]
Millis = Annotated[float, msgspec.Meta(ge=0, le=1e15)]
"""A duration in ms (or a rate): never negative, and finite, so arithmetic on it stays sane."""
Size = Annotated[int, msgspec.Meta(ge=0)]
Logprob = Annotated[float, msgspec.Meta(ge=-1.7976931348623157e308, le=0)]
"""A natural log of a probability: never above 0 (a probability above 1), and finite (an
overflowed 1e999 is not one), so exp() of it is a probability and never overflows."""


class Answer(msgspec.Struct, frozen=True):
    """What every answer's structure is: read-only once decoded."""


# --- the tokenizer -------------------------------------------------------------------------
class Piece(Answer):
    id: TokenId
    piece: str | list[Byte]
    """The token's text, or its bytes when they are not whole UTF-8 (part of a character)."""

    def data(self) -> bytes:
        if isinstance(self.piece, list):
            return bytes(self.piece)
        return self.piece.encode("utf-8")  # msgspec refuses a lone surrogate, so this cannot fail


class Pieces(Answer):
    """/tokenize with `with_pieces`."""

    tokens: list[Piece]


class Ids(Answer):
    """/tokenize without pieces."""

    tokens: list[TokenId]


class Detokenized(Answer):
    content: str


class Rendered(Answer):
    """/apply-template."""

    prompt: str


# --- what the server runs ----------------------------------------------------------------------
class Health(Answer):
    status: str = ""


class SlotDefaults(Answer):
    n_ctx: Positive


class Props(Answer):
    default_generation_settings: SlotDefaults
    model_path: Annotated[str, msgspec.Meta(min_length=1)]
    chat_template: str = ""
    bos_token: str = ""
    build_info: str = "unknown"
    model_ftype: str = ""


class ModelMeta(Answer):
    n_params: Size | None = None
    size: Size | None = None
    ftype: str = ""


class Model(Answer):
    meta: ModelMeta | None = None
    """None while the model loads."""


class Models(Answer):
    """/v1/models."""

    data: list[Model] = msgspec.field(default_factory=list)


# --- slots -----------------------------------------------------------------------------------
class SlotSaved(Answer):
    n_saved: Count


class SlotRestored(Answer):
    n_restored: Count


class Anything(Answer):
    """An answer chatapp reads nothing from (an erase, a cache-priming completion): still a
    JSON object, as every llama-server answer is."""


# --- errors and the reply stream ------------------------------------------------------------------
class ErrorDetail(Answer):
    code: Annotated[int, msgspec.Meta(ge=100, le=599)] = 500
    message: str = ""
    type: str = ""
    n_prompt_tokens: Count | None = None
    n_ctx: Count | None = None


class ErrorBody(Answer):
    """An HTTP error's body. A reverse proxy in front may say a bare string."""

    error: ErrorDetail | str


class Progress(Answer):
    total: Count
    cache: Count
    processed: Count
    time_ms: Millis

    def __post_init__(self) -> None:
        if not self.cache <= self.total or not self.processed <= self.total:
            raise ValueError("cache and processed must not exceed total")


class Timings(Answer):
    cache_n: Count = 0
    prompt_n: Count = 0
    prompt_ms: Millis = 0.0
    prompt_per_token_ms: Millis = 0.0
    prompt_per_second: Millis = 0.0
    predicted_n: Count = 0
    predicted_ms: Millis = 0.0
    predicted_per_token_ms: Millis = 0.0
    predicted_per_second: Millis = 0.0


class TopLogprob(Answer):
    id: TokenId
    token: str = ""
    logprob: Logprob = 0.0
    """Natural log of the raw probability (llama-server's n_probs without post_sampling_probs)."""


class TokenLogprobs(Answer):
    """One generated token's entry of `completion_probabilities`."""

    id: TokenId
    token: str = ""
    logprob: Logprob = 0.0
    top_logprobs: list[TopLogprob] = msgspec.field(default_factory=list)


class Event(Answer):
    """One server-sent event of a streamed /completion: prompt progress, a piece of the reply,
    the final one (stop), or an error that ends the stream."""

    content: str = ""
    tokens: list[TokenId] = msgspec.field(default_factory=list)
    stop: bool = False
    tokens_predicted: Count | None = None
    timings: Timings | None = None
    prompt_progress: Progress | None = None
    stop_type: str = ""
    truncated: bool = False
    tokens_cached: Count | None = None
    error: ErrorDetail | None = None
    completion_probabilities: list[TokenLogprobs] = msgspec.field(default_factory=list)
    """With n_probs: each token of this piece's raw top candidates."""


# --- decoding ---------------------------------------------------------------------------------
class WrongAnswer(ServerError):
    """An answer that is not llama-server's: not JSON, or JSON of another shape. Callers that
    take a refusal as "not available" (a slot file) let this one through: it is no refusal."""


A = TypeVar("A", bound=Answer)
_DECODERS: dict[type, msgspec.json.Decoder] = {}
_AT = re.compile(r"^(?P<problem>.*) - at `\$\.?(?P<field>.*)`$", re.DOTALL)


def decode(kind: type[A], content: bytes, where: str) -> A:
    """`content` as a `kind`, or a ServerError naming `where` (the URL and path) and the field."""
    decoder = _DECODERS.get(kind)
    if decoder is None:
        decoder = _DECODERS[kind] = msgspec.json.Decoder(kind)
    try:
        return decoder.decode(content)
    except msgspec.ValidationError as exc:
        raise WrongAnswer(f"{where} did not answer as a llama-server: {_field(str(exc))}") from None
    except msgspec.DecodeError:
        raise WrongAnswer(f"{where} did not answer with JSON: is it a llama-server?") from None


def _field(message: str) -> str:
    """msgspec's "Expected `int`, got `str` - at `$.tokens[0].id`" as "tokens[0].id: expected
    `int`, got `str`" (the field first, as the reader looks for it)."""
    found = _AT.match(message)
    field, problem = (found["field"] or "the answer", found["problem"]) if found else ("the answer", message)
    return one_line_text(f"{field}: {problem[:1].lower()}{problem[1:]}")
