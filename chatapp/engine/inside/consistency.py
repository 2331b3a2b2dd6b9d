"""Whether a GGUF header's figures can be true together, before the anatomy shows them as facts.

A header comes from outside and can claim anything: 10^9 blocks, -4 heads, a 10 MB name.
Shown as read, such figures mislead, and some are costly as well: the per-layer K/V heads of
10^9 blocks are a list of 8 GB that took minutes to build, and a 10 MB name is a 10 MB line on
the screen. So the anatomy first asks `problems`, which only compares numbers (no list as long
as a count the file gives is ever built), and refuses an inconsistent header in one line.

The limits are llama.cpp's own where it has one: it loads no model of more than
LLAMA_MAX_LAYERS blocks, and wants a per-layer array to have one value per block.
"""

from __future__ import annotations

import re

from gguf.constants import Keys

from chatapp.engine.models.gguf_header import ArraySummary, GGUFHeader, HeaderError
from chatapp.engine.models.quant import MAX_LAYERS

MAX_NAME_CHARS = 256
"""Model and architecture names are a few words; anything longer is not a name."""
COUNTS = (Keys.LLM.BLOCK_COUNT, Keys.LLM.EMBEDDING_LENGTH, Keys.LLM.FEED_FORWARD_LENGTH, Keys.LLM.CONTEXT_LENGTH,
          Keys.LLM.VOCAB_SIZE, Keys.LLM.EXPERT_COUNT, Keys.LLM.EXPERT_USED_COUNT, Keys.LLM.EXPERT_SHARED_COUNT,
          Keys.LLM.EXPERT_FEED_FORWARD_LENGTH, Keys.Attention.HEAD_COUNT, Keys.Attention.HEAD_COUNT_KV,
          Keys.Attention.KEY_LENGTH, Keys.Attention.VALUE_LENGTH, Keys.Attention.SLIDING_WINDOW)
"""Keys whose values count something: never negative."""
PER_LAYER = (Keys.Attention.HEAD_COUNT, Keys.Attention.HEAD_COUNT_KV, Keys.LLM.FEED_FORWARD_LENGTH)
"""Keys that may hold one value per block instead of one for all."""
_BLOCK = re.compile(r"^blk\.(\d+)\.")


class InconsistentHeader(HeaderError):
    """The header's figures contradict each other or what llama.cpp could load."""


def check(header: GGUFHeader) -> None:
    """Raise InconsistentHeader naming every problem, or return."""
    found = problems(header)
    if found:
        raise InconsistentHeader(f"the header is inconsistent, so its figures are not shown: {'; '.join(found)}")


def _number(value) -> int | float | None:
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def problems(header: GGUFHeader) -> list[str]:
    meta = header.metadata
    found: list[str] = []
    for key in ("general.name", "general.architecture"):
        value = meta.get(key)
        if isinstance(value, str) and len(value) > MAX_NAME_CHARS:
            found.append(f"{key} is {len(value):,} characters long")
    arch = meta.get("general.architecture")
    arch = arch if isinstance(arch, str) and len(arch) <= MAX_NAME_CHARS else "unknown"
    value = {template: meta.get(template.format(arch=arch)) for template in COUNTS}
    for template in COUNTS:
        key, raw = template.format(arch=arch), value[template]
        numbers = [_number(v) for v in raw] if isinstance(raw, list) else [_number(raw)]
        if any(n is not None and n < 0 for n in numbers):
            found.append(f"{key} is negative ({min(n for n in numbers if n is not None):,})")
    blocks = _number(value[Keys.LLM.BLOCK_COUNT])
    if blocks is not None and blocks > MAX_LAYERS:
        found.append(f"{Keys.LLM.BLOCK_COUNT.format(arch=arch)} is {blocks:,} (llama.cpp loads at most {MAX_LAYERS})")
    if blocks is not None and 0 <= blocks <= MAX_LAYERS:
        for template in PER_LAYER:
            raw = value[template]
            length = raw.length if isinstance(raw, ArraySummary) else len(raw) if isinstance(raw, list) else None
            if length is not None and length != blocks:
                found.append(f"{template.format(arch=arch)} has {length:,} values for {blocks:,} blocks")
        highest = max((int(m.group(1)) for t in header.tensors if (m := _BLOCK.match(t.name))), default=None)
        if highest is not None and highest >= blocks:
            found.append(f"the tensor table has blk.{highest} but {Keys.LLM.BLOCK_COUNT.format(arch=arch)} "
                         f"is {blocks:,}")
    experts, used = _number(value[Keys.LLM.EXPERT_COUNT]), _number(value[Keys.LLM.EXPERT_USED_COUNT])
    if experts is not None and used is not None and 0 <= experts < used:
        found.append(f"{used:,} experts used per token of {experts:,}")
    heads, kv_heads = _number(value[Keys.Attention.HEAD_COUNT]), _number(value[Keys.Attention.HEAD_COUNT_KV])
    if heads is not None and kv_heads is not None and 0 < heads < kv_heads:
        found.append(f"{kv_heads:,} K/V heads for {heads:,} query heads")
    return found
