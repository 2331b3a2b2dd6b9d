"""A fast reader for a GGUF file's header: metadata and the tensor table, no tensor data.

`gguf.GGUFReader` builds a numpy view for every element of every metadata array, so the
tokenizer's ~100k strings cost it seconds. This reader skips large arrays by their length
and parses the rest with `struct`, which takes milliseconds. It also checks the file is
long enough for the tensor data the header declares, which is how a truncated download
is caught without reading the weights.
"""

from __future__ import annotations

import math
import mmap
import os
import struct
from dataclasses import dataclass, field
from pathlib import Path

from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

from chatapp.paths import open_regular

GGUF_MAGIC = b"GGUF"
SUPPORTED_VERSIONS = (2, 3)
DEFAULT_ALIGNMENT = 32
MAX_ARRAY_KEPT = 64
"""Arrays up to this length keep their values; longer ones (vocabularies) only their length."""

# GGUF value types (gguf.GGUFValueType) and their struct codes.
_SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
_STRING, _ARRAY = 8, 9


class HeaderError(ValueError):
    """The GGUF header is cut short or inconsistent, or the tensor data is shorter than declared."""


class NotGGUFError(HeaderError):
    """The file does not start with the GGUF magic."""


class UnsupportedVersionError(HeaderError):
    pass


@dataclass(frozen=True)
class ArraySummary:
    """A metadata array too long to keep: its element type and length."""

    item_type: int
    length: int


@dataclass(frozen=True)
class TensorEntry:
    name: str
    shape: tuple[int, ...]
    ggml_type: int
    offset: int
    """Relative to the start of the tensor data section."""


@dataclass
class GGUFHeader:
    version: int
    metadata: dict[str, object] = field(default_factory=dict)
    tensors: list[TensorEntry] = field(default_factory=list)
    data_offset: int = 0
    file_size: int = 0


class _Cursor:
    def __init__(self, buf, order: str):
        self.buf, self.order, self.pos = buf, order, 0

    def take(self, code: str):
        fmt = self.order + code
        try:
            (value,) = struct.unpack_from(fmt, self.buf, self.pos)
        except struct.error:
            raise HeaderError(f"header ends early, at byte {self.pos}") from None
        self.pos += struct.calcsize(fmt)
        return value

    def string(self) -> str:
        n = self.take("Q")
        end = self.pos + n
        if end > len(self.buf):
            raise HeaderError(f"string at byte {self.pos} runs past the end of the file")
        raw = self.buf[self.pos:end]
        self.pos = end
        return raw.decode("utf-8", errors="replace")

    def skip_strings(self, count: int) -> None:
        buf, order, pos, size = self.buf, self.order + "Q", self.pos, len(self.buf)
        for _ in range(count):
            if pos + 8 > size:
                raise HeaderError(f"string array runs past the end of the file at byte {pos}")
            pos += 8 + struct.unpack_from(order, buf, pos)[0]
        if pos > size:
            raise HeaderError("string array runs past the end of the file")
        self.pos = pos

    def value(self, value_type: int):
        if value_type in _SCALARS:
            return self.take(_SCALARS[value_type])
        if value_type == _STRING:
            return self.string()
        if value_type == _ARRAY:
            item_type, length = self.take("I"), self.take("Q")
            if length <= MAX_ARRAY_KEPT:
                return [self.value(item_type) for _ in range(length)]
            if item_type == _STRING:
                self.skip_strings(length)
            elif item_type in _SCALARS:
                self.pos += length * struct.calcsize(_SCALARS[item_type])
            else:  # arrays of arrays: walk them
                for _ in range(length):
                    self.value(item_type)
            return ArraySummary(item_type, length)
        raise HeaderError(f"unknown metadata value type {value_type} at byte {self.pos}")


def _parse(buf, file_size: int) -> GGUFHeader:
    cursor = _Cursor(buf, "<")
    cursor.pos = 4
    version = cursor.take("I")
    if version & 0xFFFF == 0:  # written on a big-endian machine
        cursor.order = ">"
        version = struct.unpack_from(">I", buf, 4)[0]
    if version not in SUPPORTED_VERSIONS:
        raise UnsupportedVersionError(f"unsupported GGUF version {version} (supported: 2, 3)")
    n_tensors, n_kv = cursor.take("Q"), cursor.take("Q")
    if n_tensors > file_size or n_kv > file_size:
        raise HeaderError(f"implausible counts ({n_tensors} tensors, {n_kv} metadata keys)")
    header = GGUFHeader(version=version, file_size=file_size)
    for _ in range(n_kv):
        key = cursor.string()
        header.metadata[key] = cursor.value(cursor.take("I"))
    for _ in range(n_tensors):
        name = cursor.string()
        n_dims = cursor.take("I")
        if n_dims > 8:
            raise HeaderError(f"tensor {name!r} has {n_dims} dimensions")
        shape = tuple(cursor.take("Q") for _ in range(n_dims))
        header.tensors.append(TensorEntry(name, shape, cursor.take("I"), cursor.take("Q")))
    alignment = header.metadata.get("general.alignment", DEFAULT_ALIGNMENT)
    if not isinstance(alignment, int) or alignment <= 0 or alignment & (alignment - 1):
        raise HeaderError(f"invalid general.alignment {alignment!r}")
    header.data_offset = -(-cursor.pos // alignment) * alignment
    return header


def tensor_nbytes(tensor: TensorEntry) -> int:
    """Bytes of one tensor's data: whole blocks of its ggml type."""
    try:
        block, type_size = GGML_QUANT_SIZES[GGMLQuantizationType(tensor.ggml_type)]
    except (ValueError, KeyError):
        raise HeaderError(f"tensor {tensor.name!r} has unknown ggml type {tensor.ggml_type}") from None
    n = math.prod(tensor.shape)
    if n % block:
        raise HeaderError(f"tensor {tensor.name!r}: {n} elements is not a whole number of blocks of {block}")
    return n // block * type_size


def data_end(header: GGUFHeader) -> int:
    """Where the last tensor's data ends, counted from the start of the file."""
    ends = (t.offset + tensor_nbytes(t) for t in header.tensors)
    return header.data_offset + max(ends, default=0)


def read_header(path: Path, *, check_data: bool = True) -> GGUFHeader:
    """Parse magic, version, metadata and the tensor table; raises HeaderError or OSError.

    With `check_data`, also require the file to hold all the tensor data the header declares.
    """
    with open_regular(path) as f:  # a named pipe or a device is refused (an OSError), never waited on
        size = os.fstat(f.fileno()).st_size
        head = f.read(4)
        if head != GGUF_MAGIC:
            # Not one byte of it is said: it may be any file a link points at (/etc/shadow).
            raise NotGGUFError("not a GGUF file (its first 4 bytes are not GGUF's magic)")
        if size < 24:
            raise HeaderError(f"header ends early: the file has only {size} bytes")
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
            header = _parse(buf, size)
    if check_data:
        needed = data_end(header)
        if needed > size:
            raise HeaderError(f"tensor data ends early: the header declares {needed} bytes, the file has {size}")
    return header
