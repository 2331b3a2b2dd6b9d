"""Inside the next token: `chatapp perplexity FILE`, `chatapp lens TEXT` and `chatapp sampler PROMPT`.

Each loads the model on the CPU for itself (chatapp.engine.opening.open_next_token) and prints
a table or a strip, or with --json one object (chatapp.engine.inside.{surprise,lens,sampler_chain}
say what the fields mean).
"""

from __future__ import annotations

import errno
import json
import secrets
import os
import sys
from typing import Annotated, Optional

import typer
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from chatapp.commands.core import FLAG, ModelOpt, configured, default_note
from chatapp.commands.terminal import SafeConsole
from chatapp.errors import InputError, ModelError
from chatapp.format import one_line_text, visible_piece, visible_text
from chatapp.paths import RefusedFile, read_capped, size_text

JsonOpt = Annotated[bool, typer.Option("--json", metavar=FLAG, help="One JSON object instead of the table.")]
SHADE_STYLES = ("", "yellow", "bold red", "bold white on red")
"""The terminal's shades of SHADE_LABELS (chatapp.engine.inside.surprise)."""
SHADE_MARKS = ("", "⁽¹⁾", "⁽²⁾", "⁽³⁾")
"""The same shades in text, after the token, where no colour is drawn (piped, NO_COLOR)."""
MAX_SEED = 2**32 - 2


def _open(model: str | None, n_ctx: int = 256):
    from chatapp.commands.opening import model_path, settings_with
    from chatapp.engine.opening import open_next_token

    settings = settings_with()
    path = model_path(settings, model, SafeConsole(stderr=True))
    return open_next_token(settings, path, n_ctx), settings


MAX_TEXT_BYTES = 32 * 2**20
"""Text perplexity reads at most: wikitext-2's test set, llama-perplexity's usual text, is 1.3 MB,
and 32 MB is some 8 million tokens, hours of scoring on a CPU."""


def _read_text(file: str) -> str:
    """The text of a regular file or of standard input, at most MAX_TEXT_BYTES: a device
    (/dev/zero) or a named pipe is refused in one line rather than read without end or waited
    on (a pipe's text goes in as `-`)."""
    shown = one_line_text(file)
    try:
        data = sys.stdin.buffer.read(MAX_TEXT_BYTES + 1) if file == "-" else read_capped(file, MAX_TEXT_BYTES)
    except OSError as exc:
        hint = "; pipe it in as -" if isinstance(exc, RefusedFile) and exc.errno == errno.EINVAL \
            and not os.path.isdir(file) else ""  # a device's or a pipe's text can come on stdin
        raise InputError(f"cannot read {shown}: {exc.strerror or exc}{hint}") from None
    if len(data) > MAX_TEXT_BYTES:
        raise InputError(f"standard input holds more than the {size_text(MAX_TEXT_BYTES)} chatapp reads of it")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise InputError(f"{shown} is not UTF-8 text") from None


def perplexity(
    file: Annotated[str, typer.Argument(help="A UTF-8 text file, or - for standard input.")],
    ctx: Annotated[int, typer.Option("--ctx", "-c", help="Tokens per window, as llama-perplexity's -c.")] = 512,
    compare: Annotated[Optional[str], typer.Option(
        "--compare", help="A second quant of the same model (a path or a store name): adds each token's KL "
                          "divergence from the first, the share of tokens whose top choice is the same, and "
                          "the change in the text token's probability, with both files' sizes and decode "
                          "speeds; the strip is shaded by KL divergence.")] = None,
    estimate: Annotated[bool, typer.Option(
        "--estimate", metavar=FLAG, help="Only the tokens llama-perplexity scores (the second half of each full "
                                         "window): its estimate, like for like and about 10% sooner; the other "
                                         "tokens get no surprise.")] = False,
    model: ModelOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Each token's surprise (-ln p under the model) and the text's perplexity.

    The text is cut into windows of --ctx tokens as llama-perplexity cuts it; its estimate (the second
    half of each full window) is given beside the perplexity of every token.
    """
    from chatapp.engine.inside.surprise import KLD_LABELS, KLD_SHADES, SHADE_LABELS, SHADES, shade

    text = _read_text(file)
    views, _settings = _open(model)
    try:
        ids = views.text_ids(text)
        if compare is not None:
            other, _ = _open(compare)
            try:
                cost = views.compare(ids, ctx, other, only_scored=estimate,
                                     names=(model or views.name, compare))
            finally:
                other.close()
            found = cost.base
        else:
            cost, found = None, views.surprise(ids, ctx, only_scored=estimate)
    finally:
        views.close()
    if as_json:
        data = (cost or found).to_json()
        typer.echo(json.dumps(data, ensure_ascii=False, allow_nan=False))
        return
    out = SafeConsole()
    values, bounds, labels = ((cost.kld, KLD_SHADES, KLD_LABELS) if cost is not None
                              else (found.surprise, SHADES, SHADE_LABELS))
    strip, marks = Text(), not out.draws_colour  # piped: each shaded token says its shade in text
    for piece, value in zip(found.pieces, values.tolist()):
        level = shade(value, bounds)
        text, mark = visible_text(piece), SHADE_MARKS[level] if marks else ""
        ends_line = text.endswith("\n")  # the mark stays on the token's line
        strip.append(text.rstrip("\n") + mark + "\n" if ends_line and mark else text + mark, style=SHADE_STYLES[level])
    out.print(strip, soft_wrap=True)
    out.print()
    legend = Text("KL divergence: " if cost is not None else "shades: ")
    for label, style, mark in zip(labels, SHADE_STYLES, SHADE_MARKS):
        legend.append(label + (mark if marks else ""), style=style or None)
        legend.append("  ")
    out.print(legend)
    out.print(found.describe(), markup=False, highlight=False)
    for line in cost.describe() if cost is not None else ():
        out.print(line, markup=False, highlight=False)


def lens(
    text: Annotated[str, typer.Argument(help="The text whose next token (or --token N) the layers predict.")],
    token: Annotated[Optional[int], typer.Option(
        "--token", help="Predict the text's token N (2 = the second) from those before it."
                        + default_note("the next token after the text"))] = None,
    k: Annotated[int, typer.Option("--k", help="Candidates per layer.")] = 5,
    model: ModelOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """The logit lens: each layer's output put through the final norm and the output head.

    Shows, layer by layer, the top candidates for the next token and the rank and probability of the
    token that comes (the text's own with --token, else the model's top choice).
    """
    from chatapp.engine.inside.lens import positions_for

    if not text:
        raise InputError("the text is empty")
    if not 1 <= k <= 100:
        raise InputError(f"--k must be between 1 and 100, got {k}")
    views, _settings = _open(model)
    try:
        ids = views.text_ids(text)
        shift = views.text_start  # token N counts the text's tokens, not a BOS
        position, given = positions_for(len(ids) - shift, token)
        found = views.lens(ids, position + shift, ids[position + shift + 1] if given else None, k)
    finally:
        views.close()
    if as_json:
        typer.echo(json.dumps(found.to_json(), ensure_ascii=False, allow_nan=False))
        return
    what = "the text's token" if found.given else "the model's choice"
    table = Table("layer", f"rank of {visible_piece(found.piece)!r}", "p", "top candidates",
                  title=escape(f"Logit lens: layer by layer, {what} {visible_piece(found.piece)!r}"),
                  title_justify="left")
    for layer in found.layers:
        tops = ", ".join(f"{one_line_text(visible_piece(c.piece))!r} {c.p:.0%}" for c in layer.top)
        table.add_row(str(layer.layer), f"{layer.rank:,}", f"{layer.p:.3f}", escape(tops))
    out = SafeConsole()
    out.print(table)
    first = found.first_top
    out.print(("top-1 from layer " + str(first) + " on") if first is not None else "not top-1 at the last layer",
              markup=False, highlight=False)
    out.print(found.how(), markup=False, highlight=False)


def sampler(
    prompt: Annotated[str, typer.Argument(help="A user message; the reply to it is drawn, then replayed.")],
    seed: Annotated[Optional[int], typer.Option("--seed", help="The draw's seed." + default_note(
        "seed in the config; -1 there picks one, which the output names"))] = None,
    temperature: Annotated[Optional[float], typer.Option("--temperature", "-t", help="Sampling temperature."
                                                         + configured("temperature"))] = None,
    top_k: Annotated[Optional[int], typer.Option("--top-k", help="top_k (0: off)." + configured("top_k"))] = None,
    top_p: Annotated[Optional[float], typer.Option("--top-p", help="top_p (1: off)." + configured("top_p"))] = None,
    min_p: Annotated[Optional[float], typer.Option("--min-p", help="min_p (0: off)." + configured("min_p"))] = None,
    max_tokens: Annotated[int, typer.Option("--max-tokens", "-n", help="The reply's most tokens.")] = 32,
    token: Annotated[Optional[int], typer.Option(
        "--token", help="The reply token whose stages the table shows (1 = the first)."
                        + default_note("the one the model was least sure of"))] = None,
    model: ModelOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """The sampler chain stage by stage: what top_k, top_p, min_p, temperature and the draw did.

    A reply is drawn with llama.cpp's chain as a turn draws it, then replayed with each sampler applied on
    its own, with the same seed: the replay must draw the same tokens, and shows what each stage cut.
    """
    from chatapp.commands.opening import settings_with

    if not 1 <= max_tokens <= 512:
        raise InputError(f"--max-tokens must be between 1 and 512, got {max_tokens}")
    base = settings_with(**{key: value for key, value in (("temperature", temperature), ("top_k", top_k),
                                                           ("top_p", top_p), ("min_p", min_p)) if value is not None})
    seed = base.seed if seed is None else seed
    if seed < 0:
        seed = secrets.randbelow(MAX_SEED + 1)
    elif seed > MAX_SEED:
        raise InputError(f"--seed must be -1 or 0 to {MAX_SEED:,}, got {seed}")
    chain = {"temperature": base.temperature, "top_k": base.top_k, "top_p": base.top_p, "min_p": base.min_p,
             "seed": seed}
    views, _settings = _open(model, n_ctx=1024)
    try:
        ids = views.chat_prompt_ids(base.system_prompt, prompt)
        if len(ids) + max_tokens > views.n_ctx:
            raise InputError(f"the prompt is {len(ids):,} tokens: too long to look at here")
        reply = views.generate(ids, max_tokens=max_tokens, **chain)
        found = views.replay_chain(ids, reply, **chain)
    finally:
        views.close()
    equal, compared = found.matches
    if equal != compared:
        raise ModelError(f"the replay drew the turn's token at {equal} of {compared} positions")
    if as_json:
        data = found.to_json()
        data["reply"] = "".join(step.piece for step in found.steps)
        typer.echo(json.dumps(data, ensure_ascii=False, allow_nan=False))
        return
    if token is not None and not 1 <= token <= len(found.steps):
        raise InputError(f"--token must be between 1 and {len(found.steps)}: the reply has {len(found.steps)} tokens")
    step = found.steps[token - 1] if token is not None else min(found.steps, key=lambda s: s.p_model)
    out = SafeConsole()
    out.print(Text("reply: ") + Text("".join(s.piece for s in found.steps)), soft_wrap=True)
    table = Table("stage", "left", "mass", "top candidates (p after the stage)",
                  title=escape(f"Token {step.index + 1} {visible_piece(step.piece)!r}: p {step.p_model:.3f} from the "
                               f"model, {step.p_final:.3f} in the draw"), title_justify="left")
    for stage in step.stages:
        tops = ", ".join(f"{one_line_text(visible_piece(c.piece))!r} {c.p:.0%}" for c in stage.top[:5])
        table.add_row(stage.name, f"{stage.kept:,}", f"{stage.mass:.1%}", escape(tops))
    out.print(table)
    out.print(found.how(), markup=False, highlight=False)
