"""The anatomy in words: sections of (label, value) rows that the CLI and the Anatomy screen
both draw, so the two always say the same thing. Plain strings, with the file's control
characters escaped; styling is the caller's."""

from __future__ import annotations

from dataclasses import dataclass

from chatapp.engine.inside.anatomy import FAMILY_LABELS, Anatomy, Block, TensorFact
from chatapp.format import count, human_bytes, human_count, one_line_text, percent

UNKNOWN = "unknown"


@dataclass(frozen=True)
class Section:
    title: str
    rows: list[tuple[str, str]]


def _n(value: int | float | None, unit: str = "") -> str:
    if value is None:
        return UNKNOWN
    text = f"{value:,.0f}" if isinstance(value, float) and value.is_integer() else f"{value:,}"
    return f"{text}{unit}"


def _plural(n: int, noun: str) -> str:
    return f"{count(n)} {noun}{'' if n == 1 else 's'}"


def _tensor(fact: TensorFact) -> str:
    shape = " × ".join(f"{d:,}" for d in reversed(fact.shape))
    return f"{shape} = {human_count(fact.params)} params, {fact.type}, {human_bytes(fact.bytes)}"


def _params(a: Anatomy) -> list[tuple[str, str]]:
    rows = [("parameters", f"{human_count(a.params_total)} ({count(a.params_total)})")]
    if a.params_active is None:
        rows.append(("active per token", UNKNOWN))
    elif a.params_active != a.params_total:
        share = percent(a.params_active / a.params_total)
        rows.append(("active per token", f"{human_count(a.params_active)} ({share}: only the routed experts run)"))
    else:
        rows.append(("active per token", "all of them (dense)"))
    return rows


def _attention(a: Anatomy) -> list[tuple[str, str]]:
    heads = f"{_n(a.n_head)} query, {_n(a.n_head_kv)} key/value"
    if a.n_head_kv_per_layer:
        heads += f" (per layer: {', '.join(str(h) for h in a.n_head_kv_per_layer)})"
    if a.gqa_ratio is None:
        gqa = UNKNOWN
    elif a.gqa_ratio == 1:
        gqa = "1 (every query head has its own K/V head)"
    else:
        gqa = f"{a.gqa_ratio:g} ({a.gqa_ratio:g} query heads share each K/V head)"
    size = _n(a.head_dim) if a.head_dim == a.value_dim else f"key {_n(a.head_dim)}, value {_n(a.value_dim)}"
    rows = [("attention heads", heads), ("GQA ratio", gqa), ("head size", size),
            ("RoPE base", _n(a.rope_base))]
    if a.sliding_window:
        rows.append(("sliding window", f"{a.sliding_window:,} tokens, on some layers"))
    return rows


def _ffn(a: Anatomy) -> list[tuple[str, str]]:
    rows = [("feed-forward", _n(a.n_ff))]
    if a.expert_count == 0:
        return rows
    used = f"{_n(a.expert_used_count)} used per token"
    rows.append(("experts", f"{_n(a.expert_count)}, {used}"))
    if a.expert_shared_count:
        rows.append(("shared experts", f"{a.expert_shared_count} (run for every token)"))
    rows.append(("expert feed-forward", _n(a.n_ff_expert)))
    return rows


def block_summary(blocks: list[Block]) -> str:
    if not blocks:
        return "no blocks in the tensor table"
    sizes = [b.bytes for b in blocks]
    params = [b.params for b in blocks]
    if min(sizes) == max(sizes):
        return f"{len(blocks)} × {human_bytes(sizes[0])} ({human_count(params[0])} params each)"
    low, high = human_count(min(params)), human_count(max(params))
    return (f"{len(blocks)} blocks, {human_bytes(min(sizes))} to {human_bytes(max(sizes))} "
            f"({low if low == high else f'{low} to {high}'} params each)")


def sections(a: Anatomy) -> list[Section]:
    model = [("architecture", a.arch), ("file type", a.file_type), *_params(a),
             ("weights", human_bytes(a.weight_bytes)), ("training context", _n(a.context_length, " tokens"))]
    embedding = [("vocabulary", _n(a.n_vocab, " tokens")), ("width (n_embd)", _n(a.n_embd)),
                 ("token_embd", _tensor(a.embedding) if a.embedding else "not in the file")]
    blocks = [("layers", _n(a.n_layer)), *_attention(a), *_ffn(a), ("per block", block_summary(a.blocks))]
    if a.output is not None:
        head = [("output", _tensor(a.output))]
    elif a.output_tied:
        head = [("output", "tied to the embedding: token_embd is read again to score the next token")]
    else:
        head = [("output", "no output.weight and no token_embd")]
    families = []
    for name, tally in a.families.items():
        share = percent(tally.bytes / a.weight_bytes) if a.weight_bytes else "?"
        families.append((FAMILY_LABELS[name], f"{human_bytes(tally.bytes)} ({share}) · "
                         f"{human_count(tally.params)} params · {_plural(tally.tensors, 'tensor')}"))
    kv_total = a.kv.bytes_per_token
    kv = [(f"step {i}", step) for i, step in enumerate(a.kv.steps, 1)]
    kv.append((f"per token ({a.kv.kv_type})", f"{kv_total:,} B ({human_bytes(kv_total)})" if kv_total else UNKNOWN))
    result = [Section("Model", model), Section("Token embedding", embedding), Section("Blocks", blocks),
              Section("Output head", head), Section("Tensor families, by bytes", families),
              Section("KV cache per token", kv)]
    if a.notes:
        result.append(Section("Notes", [("", note) for note in a.notes]))
    # The architecture and the keys come from the file: one line each, escapes shown, not sent.
    return [Section(s.title, [(one_line_text(label), one_line_text(value)) for label, value in s.rows])
            for s in result]
