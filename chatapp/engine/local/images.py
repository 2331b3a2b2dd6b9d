"""The in-process backend's images: the projector loaded on the first image, each media marker
in a prompt turned into that image's cells, and a prefill that decodes an image from its kept
embeddings where text would be evaluated (chatapp.engine.local.llama.mtmd encodes each image once).

The cells of an image sit in the runtime's token list under pseudo ids drawn from its hash, so
the cache's longest-prefix reuse, a branch's kept state and a resumed one find the image again
by comparing ids alone; only the prefill has to know where an image lies, to decode its
embeddings there and never keep half of one.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

from chatapp.engine.backend import PREFILL_CHUNK, prefill_batches, split_evenly
from chatapp.engine.images import MEDIA_MARKER, ImageFacts, image_sha
from chatapp.engine.local.llama import LlamaRuntime
from chatapp.engine.tokens import Token, common_prefix
from chatapp.errors import AttachmentError, InputError

Span = tuple[int, int, object]
"""[start, end) of an image's cells in a token list, and its ImageCells."""


class LocalImages:
    def __init__(self, runtime: LlamaRuntime, projector: Path | None, *, n_threads: int = 1,
                 image_max_tokens: int = -1) -> None:
        self._runtime = runtime
        self.projector_path = projector
        self._projector = None
        self._n_threads = n_threads
        self._image_max_tokens = image_max_tokens
        self._cells: dict[str, object] = {}
        self._by_first: dict[int, list[object]] = {}  # an image's first pseudo id -> its cells
        self._counted = (0, 0.0)  # encodes and ms at the start of the turn

    def _loaded(self):
        if self._projector is None:
            from chatapp.engine.local.llama.mtmd import MEDIA_MARKER as LIBMTMD_MARKER, Projector

            assert LIBMTMD_MARKER == MEDIA_MARKER, LIBMTMD_MARKER
            self._projector = Projector(self._runtime, self.projector_path, n_threads=self._n_threads,
                                        image_max_tokens=self._image_max_tokens)
        return self._projector

    def add(self, data: bytes, name: str) -> ImageFacts:
        if self.projector_path is None:
            raise AttachmentError(f"{self._runtime.path.name} does not see images: it has no projector (give its "
                                  "mmproj GGUF with --mmproj, or keep it beside the model as mmproj-*.gguf)")
        sha = image_sha(data)
        cells = self._cells.get(sha) or self._loaded().image(data, name)
        if sha not in self._cells:
            self._cells[sha] = cells
            self._by_first.setdefault(cells.ids[cells.image_span[0]], []).append(cells)
        return ImageFacts(sha, name, cells.width, cells.height, cells.n_tokens, cells.nx, cells.ny)

    # --- a prompt with images --------------------------------------------------------------
    def tokenize(self, text: str, images: Sequence[str], tokenize: Callable[[str, bool], list[int]]) -> list[int]:
        """`text`'s ids with each marker as the next image's cells; `tokenize(part, first)` cuts
        the text between them (`first`: the part a BOS may go before)."""
        parts = text.split(MEDIA_MARKER)
        if len(parts) - 1 != len(images):
            raise InputError(f"the prompt holds {len(parts) - 1} image markers for {len(images)} images")
        ids = tokenize(parts[0], True)
        for sha, part in zip(images, parts[1:]):
            cells = self._cells.get(sha)
            if cells is None:
                raise AttachmentError(f"the image {sha[:12]} was not given to this model")
            ids += list(cells.ids) + tokenize(part, False)
        return ids

    def spans(self, ids: Sequence[int]) -> list[Span]:
        """Where known images' cells lie in `ids`, in order."""
        if not self._by_first:
            return []
        found, i = [], 0
        while i < len(ids):
            for cells in self._by_first.get(ids[i], ()):
                start = i - cells.image_span[0]
                end = start + len(cells.ids)
                if start >= 0 and tuple(ids[start:end]) == cells.ids:
                    found.append((start, end, cells))
                    i = end - 1
                    break
            i += 1
        return found

    @staticmethod
    def not_inside(spans: Sequence[Span], n: int) -> int:
        """`n`, or the start of the image it would cut in two: an image is kept whole or not at all."""
        for start, end, _ in spans:
            if start < n < end:
                return start
        return n

    def plan(self, prompt: Sequence[int], start: int, spans: Sequence[Span]) -> list[int | object]:
        """How to compute prompt[start:]: text in batch sizes, each image as its cells whole. With
        no image in it, the plain turn's batches (chatapp.engine.backend.prefill_batches)."""
        later = [s for s in spans if s[1] > start]
        if not later:
            return list(prefill_batches(start, len(prompt)))
        steps: list[int | object] = []
        pos = start
        for s, e, cells in later:
            steps += split_evenly(s - pos, PREFILL_CHUNK)
            steps.append(cells)
            pos = e
        return steps + list(prefill_batches(pos, len(prompt)))

    def decode(self, cells) -> None:
        self._loaded().decode(cells)

    def feed(self, ids: Sequence[int]) -> None:
        """Make the cache hold `ids` up to the end of its last image (nothing without one), its
        images decoded from their embeddings: for passes that read tokens only (scoring)."""
        spans = self.spans(ids)
        if not spans:
            return
        rt, end = self._runtime, spans[-1][1]
        rt.keep_kv_prefix(self.not_inside(spans, common_prefix(rt.kv_tokens, list(ids[:end]))))
        for step in self.plan(ids[:end], rt.n_cached, spans):
            if isinstance(step, int):
                rt.eval(list(ids[rt.n_cached:rt.n_cached + step]))
            else:
                self.decode(step)

    @staticmethod
    def before_uncached_image(spans: Sequence[Span], n: int, cached: int) -> int:
        """How far prefill while typing may go in `n` tokens whose images lie at `spans`: up to the
        first image not cached (its encode waits for the turn, which reports it)."""
        for start, end, _ in spans:
            if end > cached:
                return start
        return n

    # --- what a turn reports ---------------------------------------------------------------
    def turn_started(self) -> None:
        p = self._projector
        self._counted = (p.encodes, p.encode_ms) if p is not None else (0, 0.0)

    def turn_figures(self, prompt: Sequence[int]) -> dict:
        """The record's image figures: images and their cells in the prompt, encodes this turn."""
        spans = self.spans(prompt)
        if not spans:
            return {}
        p = self._projector
        encodes, ms = (p.encodes, p.encode_ms) if p is not None else self._counted
        return {"images": len(spans), "image_tokens": sum(c.n_tokens for _, _, c in spans),
                "image_encodes": encodes - self._counted[0], "image_encode_ms": round(ms - self._counted[1], 3)}

    def describe(self, tokens: list[Token]) -> list[Token]:
        """An image's pseudo ids are no vocabulary pieces: each reads as an image cell, the first
        as the marker the text has there."""
        for start, _, cells in self.spans([t.id for t in tokens]):
            a, b = cells.image_span
            for k in range(start + a, start + b):
                tokens[k] = replace(tokens[k], piece=MEDIA_MARKER if k == start + a else "", special=False,
                                    raw=b"", image=True)
        return tokens

    def close(self) -> None:
        if self._projector is not None:
            self._projector.close()
            self._projector = None
