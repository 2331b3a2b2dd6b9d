"""`chatapp neighbours TEXT`: the tokens nearest to TEXT's token in the model's embedding matrix."""

from __future__ import annotations

from typing import Annotated, Optional

import typer
from rich.markup import escape
from rich.table import Table

from chatapp.commands.core import ModelOpt, default_note
from chatapp.commands.terminal import SafeConsole
from chatapp.errors import InputError, ModelError
from chatapp.format import one_line_text, strict_json, visible_piece

MAX_K = 1000


def pick_token(tokens: list, chosen: int | None) -> tuple[int, str | None]:
    """Which of TEXT's tokens to look up (an index), and the one line that says so when TEXT has several.

    Without --token: the first token that is not only whitespace (" 7" is " " then "7" in some
    vocabularies, and a space's neighbours say nothing about 7).
    """
    if chosen is not None:
        if not 1 <= chosen <= len(tokens):
            raise InputError(f"--token must be between 1 and {len(tokens)}: the text has {_tokens(len(tokens))}")
        index = chosen - 1
    else:
        index = next((i for i, t in enumerate(tokens) if t.piece.strip()), 0)
    if len(tokens) == 1:
        return index, None
    listed = " ".join(f"{i}:{visible_piece(t.piece)!r}" for i, t in enumerate(tokens, 1))
    how = "" if chosen is not None else "; --token N picks another"
    return index, f"the text is {_tokens(len(tokens))} ({listed}); showing token {index + 1}{how}"


def _tokens(n: int) -> str:
    return f"{n:,} token{'' if n == 1 else 's'}"


def neighbours(
    text: Annotated[str, typer.Argument(help="A word or piece of text; its token is looked up.")],
    model: ModelOpt = None,
    k: Annotated[int, typer.Option("--k", help="How many neighbours to show.")] = 10,
    token: Annotated[Optional[int], typer.Option(
        "--token", help="When TEXT is several tokens, which one (1 = the first)."
                        + default_note("the first that is not only whitespace"))] = None,
    as_json: Annotated[bool, typer.Option("--json", metavar="",  # no `<bool>` in typer 0.29's help
                                          help='A list of {"id", "piece", "score"} (score null where the file '
                                               'gives none).')] = False,
) -> None:
    """The tokens nearest to TEXT's token in the model's input-embedding matrix, by cosine similarity.

    The first use on a model dequantizes and caches its embeddings (about a second for the default model).
    """
    from chatapp.commands.opening import model_path
    from chatapp.config import load_settings
    from chatapp.engine.inside.neighbours import EmbeddingIndex
    from chatapp.engine.opening import load_engine

    if not text:
        raise InputError("the text is empty")
    if not 1 <= k <= MAX_K:
        raise InputError(f"--k must be between 1 and {MAX_K}, got {k}")
    err = SafeConsole(stderr=True)
    settings = load_settings()
    path = model_path(settings, model, err)
    # The model is loaded only for its tokenizer: the smallest context, nothing on a GPU.
    engine = load_engine(settings.replace(n_ctx=256, gpu_layers=0), path)
    try:
        tokens = engine.tokenize(text)
        if not tokens:
            raise InputError("the text is no tokens at all")
        index, note = pick_token(tokens, token)
        if note:
            err.print(note, markup=False, highlight=False)
        try:
            found = EmbeddingIndex.open(path).nearest(engine.describe, tokens[index].id, k)
        except (ValueError, OSError) as exc:
            raise ModelError(f"cannot read the embeddings of {path.name}: {exc}") from None
    finally:
        engine.close()
    if as_json:
        # allow_nan=False: a score the model's file cannot give is null (Neighbour.to_json), and
        # a NaN that got through anyway is an error here rather than output that is not JSON.
        typer.echo(strict_json([n.to_json() for n in found], ensure_ascii=False))
        return
    chosen = tokens[index]
    title = escape(f"Nearest to {visible_piece(chosen.piece)!r} (id {chosen.id})")
    table = Table("", "token", "id", "cosine", title=title,
                  title_justify="left")
    for rank, n in enumerate(found, 1):
        # A piece is the model file's text: its control characters are shown, not sent.
        table.add_row(str(rank), escape(one_line_text(visible_piece(n.piece))), str(n.id),
                      "n/a" if n.score is None else f"{n.score:.3f}")
    SafeConsole().print(table)
