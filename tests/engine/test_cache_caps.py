"""Each kept cache is read up to a cap fitted to what chatapp writes there: a draft policy
file of 32 MB was restored whole (1.3 GB of memory, decoding 6x slower), for figures that fill
a kilobyte. A bigger file counts as empty, costs no more than its cap to look at, and the next
write replaces it."""

from __future__ import annotations

import json
import tracemalloc

from chatapp.engine.filecache import FIGURES_BYTES, MAX_CACHE_BYTES, FileCache, sha256_cache

POLICY_CACHE = "draft_policy_1"
"""chatapp.engine.local.drafting.POLICY_CACHE (named here: that module loads llama.cpp)."""


def policy_file(cache: FileCache, model, size: int) -> None:
    """A draft policy cache as chatapp writes it, padded with learned figures to `size` bytes."""
    stat = model.stat()
    ratios = {str(m): 1.5 for m in range(2, size // 12)}
    entry = {"size": stat.st_size, "mtime_ns": stat.st_mtime_ns, "value": {"settings": {"ratios": ratios}}}
    cache.path.parent.mkdir(parents=True, exist_ok=True)
    cache.path.write_text(json.dumps({"format": 1, "entries": {str(model.resolve()): entry}}))


def test_a_drafting_cache_over_its_cap_is_not_read_and_the_next_write_replaces_it(tmp_path):
    model = tmp_path / "model.gguf"
    model.write_bytes(b"GGUF weights")
    cache = FileCache(POLICY_CACHE, tmp_path / "cache")
    policy_file(cache, model, 64 << 10)
    assert set(cache.get(model)["settings"]["ratios"]) >= {"2", "3"}  # one of its own size is read
    policy_file(cache, model, 4 << 20)  # under the 16 MiB every cache was read up to
    assert cache.path.stat().st_size > 8 * FIGURES_BYTES
    tracemalloc.start()
    try:
        assert cache.get(model) is None
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 2 * FIGURES_BYTES, f"{peak:,} bytes to look at it"
    assert cache.put(model, {"settings": {"ratios": {"2": 1.8}}})
    assert cache.path.stat().st_size < 1024 and cache.get(model) == {"settings": {"ratios": {"2": 1.8}}}


def test_a_listing_cache_keeps_the_larger_cap():
    assert sha256_cache().max_bytes == MAX_CACHE_BYTES > FIGURES_BYTES
    assert FileCache(POLICY_CACHE).max_bytes == FIGURES_BYTES
