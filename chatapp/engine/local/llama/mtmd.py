"""Images through libmtmd: a projector beside the model, an image's cells, each image encoded once.

libmtmd turns an image into `n_tokens` embeddings (an `nx` x `ny` grid for most projectors) that
are decoded into the KV cache like tokens. llama-cpp-python's own multimodal chat handlers reset
the cache on every call, so every turn re-encodes every image; here an image's embeddings are kept
by content hash for the projector's life, and its cells are booked in the runtime's token list
under pseudo ids drawn from that hash. Every place that compares token lists (the longest cached
prefix, a branch leaf's KV state, a resumed session's state) then tells two images apart and finds
the same image again without knowing images exist, so a later turn, a branch switch and a resume
keep the image's cells and encode nothing.
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import llama_cpp
import numpy as np
from llama_cpp import mtmd_cpp as mtmd

from chatapp.engine.local.llama.runtime import LlamaRuntime
from chatapp.engine.models.projector import projector_info
from chatapp.errors import AttachmentError, ModelError

MEDIA_MARKER = mtmd.mtmd_default_marker().decode()
_NO_CALLBACK = mtmd.mtmd_helper_post_decode_callback()  # NULL: nothing to do after each sub-batch


@contextlib.contextmanager
def _quiet_stderr():
    """libmtmd's clip loader prints every tensor on fd 2, which is the terminal in the TUI too
    (where sys.stderr is Textual's and runtime.quiet_stderr has no descriptor to hide)."""
    sys.stderr.flush()
    saved = os.dup(2)
    with open(os.devnull, "w") as devnull:
        os.dup2(devnull.fileno(), 2)
    try:
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


@dataclass(frozen=True)
class ImageCells:
    """An image as the cache holds it: libmtmd's chunks in order, text glue and the image itself."""

    sha256: str
    width: int
    height: int
    n_tokens: int
    """The image chunk's token count, libmtmd's `mtmd_input_chunk_get_n_tokens`."""
    nx: int
    ny: int
    ids: tuple[int, ...]
    """What the runtime's token list holds for these cells: glue tokens as they are, the image's
    cells as pseudo ids seeded by the hash (so two images never share a cached prefix)."""
    image_span: tuple[int, int]
    """[start, end) of the image's own cells within `ids`."""


class Projector:
    """One mmproj loaded against a runtime's model; encodes each distinct image at most once."""

    def __init__(self, runtime: LlamaRuntime, path: Path, *, n_threads: int = 1, image_max_tokens: int = -1):
        self._ctx = None
        self._chunks: dict[str, object] = {}  # before anything can raise: close() runs on a half-made one too
        self.info = projector_info(path)
        self.runtime = runtime
        model = runtime.model
        text_embd = int(llama_cpp.llama_model_n_embd(model))
        if self.info.n_embd is not None and self.info.n_embd != text_embd:
            raise ModelError(f"{Path(path).name} projects into {self.info.n_embd}-wide embeddings but "
                             f"{runtime.path.name} uses {text_embd}: it is the projector of another model")
        params = mtmd.mtmd_context_params_default()
        params.use_gpu = False
        params.n_threads = n_threads
        params.warmup = False
        params.print_timings = False
        if image_max_tokens > 0:
            params.image_max_tokens = image_max_tokens
        with _quiet_stderr():
            self._ctx = mtmd.mtmd_init_from_file(str(path).encode(), model, params)
        if not self._ctx:
            raise ModelError(f"libmtmd could not load the projector {path}")
        self.vision = bool(mtmd.mtmd_support_vision(self._ctx))
        self.audio = bool(mtmd.mtmd_support_audio(self._ctx))
        self.encodes = 0
        """Images encoded so far: the figure the encoded-once promise is checked against."""
        self.encode_ms = 0.0
        self.last_encode_ms = 0.0
        self._embd: dict[str, np.ndarray] = {}
        self._cells: dict[str, ImageCells] = {}

    # --- an image's cells ----------------------------------------------------------
    def image(self, data: bytes, name: str = "the file") -> ImageCells:
        """Tokenize an image (bytes of a PNG, JPEG, BMP, GIF, PNM...); encoding waits for `decode`."""
        sha = hashlib.sha256(data).hexdigest()
        if sha in self._cells:
            return self._cells[sha]
        buf = (ctypes.c_uint8 * len(data)).from_buffer_copy(data)
        with _quiet_stderr():
            bitmap = mtmd.mtmd_helper_bitmap_init_from_buf(self._ctx, buf, len(data), False)
        if not bitmap:
            raise AttachmentError(f"{name} is not an image libmtmd can read (PNG, JPEG, BMP, GIF, PNM), "
                                  "or it is cut short")
        try:
            width, height = mtmd.mtmd_bitmap_get_nx(bitmap), mtmd.mtmd_bitmap_get_ny(bitmap)
            chunks = mtmd.mtmd_input_chunks_init()
            marker = MEDIA_MARKER.encode()
            text = mtmd.mtmd_input_text(text=marker, text_len=len(marker), add_special=False, parse_special=True)
            bitmaps = (mtmd.mtmd_bitmap_p_ctypes * 1)(bitmap)
            with _quiet_stderr():
                status = mtmd.mtmd_tokenize(self._ctx, chunks, ctypes.byref(text), bitmaps, 1)
        finally:
            mtmd.mtmd_bitmap_free(bitmap)
        if status != 0:
            mtmd.mtmd_input_chunks_free(chunks)
            raise AttachmentError(f"libmtmd could not turn {name} into tokens (mtmd_tokenize returned {status})")
        ids: list[int] = []
        span, grid = (0, 0), (0, 0)
        rng = np.random.default_rng(int(sha[:16], 16))
        for i in range(mtmd.mtmd_input_chunks_size(chunks)):
            chunk = mtmd.mtmd_input_chunks_get(chunks, i)
            if mtmd.mtmd_input_chunk_get_type(chunk) == mtmd.MTMD_INPUT_CHUNK_TYPE_TEXT:
                n = ctypes.c_size_t()
                tokens = mtmd.mtmd_input_chunk_get_tokens_text(chunk, ctypes.byref(n))
                ids += [tokens[j] for j in range(n.value)]
                continue
            image = mtmd.mtmd_input_chunk_get_tokens_image(chunk)
            n_tokens = mtmd.mtmd_input_chunk_get_n_tokens(chunk)
            grid = (mtmd.mtmd_image_tokens_get_nx(image), mtmd.mtmd_image_tokens_get_ny(image))
            span = (len(ids), len(ids) + n_tokens)
            ids += rng.integers(0, self.runtime.n_vocab, n_tokens).tolist()
        self._chunks[sha] = chunks
        cells = ImageCells(sha, width, height, span[1] - span[0], grid[0], grid[1], tuple(ids), span)
        self._cells[sha] = cells
        return cells

    def _image_chunk(self, sha: str):
        chunks = self._chunks[sha]
        for i in range(mtmd.mtmd_input_chunks_size(chunks)):
            chunk = mtmd.mtmd_input_chunks_get(chunks, i)
            if mtmd.mtmd_input_chunk_get_type(chunk) != mtmd.MTMD_INPUT_CHUNK_TYPE_TEXT:
                return chunk
        raise ModelError("libmtmd gave no image chunk")

    def embeddings(self, cells: ImageCells) -> np.ndarray:
        """The image's embeddings (n_tokens x n_embd): encoded on first use, kept after."""
        embd = self._embd.get(cells.sha256)
        if embd is None:
            chunk = self._image_chunk(cells.sha256)
            began = time.perf_counter()
            with _quiet_stderr():
                status = mtmd.mtmd_encode_chunk(self._ctx, chunk)
            if status != 0:
                raise ModelError("libmtmd could not encode the image")
            out = mtmd.mtmd_get_output_embd(self._ctx)
            n_embd = int(llama_cpp.llama_model_n_embd(self.runtime.model))
            embd = np.ctypeslib.as_array(out, shape=(cells.n_tokens * n_embd,)).copy()
            self.last_encode_ms = (time.perf_counter() - began) * 1000
            self.encode_ms += self.last_encode_ms
            self.encodes += 1
            self._embd[cells.sha256] = embd
        return embd

    def decode(self, cells: ImageCells) -> None:
        """Append the image's cells (glue text and embeddings) after what the runtime has cached."""
        rt = self.runtime
        if rt.n_cached + len(cells.ids) > rt.n_ctx:
            raise ModelError(f"the image's {len(cells.ids)} cells would overflow the {rt.n_ctx}-token context")
        start, end = cells.image_span
        if start:
            rt.eval(list(cells.ids[:start]))
        embd = self.embeddings(cells)
        lctx, at = rt.ctx, rt.n_cached
        rt.forget_logits()
        new_n_past = llama_cpp.llama_pos(0)
        with _quiet_stderr():
            status = mtmd.mtmd_helper_decode_image_chunk(
                self._ctx, lctx, self._image_chunk(cells.sha256), embd.ctypes.data_as(ctypes.POINTER(ctypes.c_float)),
                rt.n_cached, 0, rt.n_batch, ctypes.byref(new_n_past), _NO_CALLBACK, None)
        if status != 0:
            raise ModelError(f"llama.cpp could not decode the image's embeddings (status {status})")
        rt.record_batch(at, list(cells.ids[start:end]))
        if end < len(cells.ids):
            rt.eval(list(cells.ids[end:]))

    def close(self) -> None:
        for chunks in self._chunks.values():
            mtmd.mtmd_input_chunks_free(chunks)
        self._chunks.clear()
        ctx, self._ctx = self._ctx, None
        if ctx:
            mtmd.mtmd_free(ctx)

    def __del__(self):
        self.close()

