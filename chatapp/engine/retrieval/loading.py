"""Reading attachments: a file, or a folder's text files, into text the model can be given.

All or nothing: a path either yields its attachments or raises `AttachmentError` with one line
that says why; nothing is attached half-way. Inside a folder, hidden entries are not visited,
and files that cannot be read (binary, too large, undecodable, a PDF without text) are skipped
with a notice; the folder is refused only when nothing in it is readable or it is too big.

Encodings: text is read as strict UTF-8 (a UTF-8 or UTF-16 byte-order mark is honoured). Bytes
that are not UTF-8 are read as Windows-1252 when every byte is defined there, with a notice that
says so, because legacy Windows and Latin-1 files are the common non-UTF-8 text; anything else
is refused rather than shown to the model with replacement characters. Line endings become
"\\n", so line numbers match what an editor shows.

A file is binary when its first 8 KiB hold a NUL byte, the test git and grep use. Sizes are
checked before reading, so a 200 MB file costs a `stat`, not 200 MB of memory.

A file is a PDF by its extension, or when it starts with "%PDF-" and pypdf can read it; a text
file that only starts so is read as text, with a notice. A file name can hold an escape
sequence that would set the terminal's title or clipboard, or a line break: an attachment is
named by its name escaped (chatapp.format.one_line_text), so what the header, the transcript,
the labels, stderr and `/detach` show and take is one safe line, and so are the paths in
every message. The attach can be stopped between files (chatapp.engine.retrieval.cancel).
"""

from __future__ import annotations

import codecs
import os
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path

from chatapp.engine.retrieval import cancel, pdf
from chatapp.engine.retrieval.document import Attachment
from chatapp.errors import AttachmentError
from chatapp.format import one_line_text

MAX_TEXT_BYTES = 8 * 2**20
"""About two million tokens: far more than any context holds, so retrieval still has to choose."""
MAX_PDF_BYTES = 32 * 2**20
"""PDFs carry fonts and images; their text is a small part of their size."""
MAX_FOLDER_FILES = 500
MAX_FOLDER_TEXT_BYTES = 32 * 2**20
SKIPPED_FOLDERS = frozenset({"__pycache__", "node_modules"})
"""Never a person's documents, and node_modules alone can hold tens of thousands of files."""
SNIFF_BYTES = 8192
UTF16_BOMS = (codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)


class BinaryFileError(AttachmentError):
    """A file that holds NUL bytes. In a folder these are skipped and only counted."""


@dataclass(frozen=True)
class Loaded:
    attachments: tuple[Attachment, ...]
    notices: tuple[str, ...] = ()
    """One line each: an encoding fallback, or files of a folder that were skipped."""


def load_path(path: str | Path, reader: pdf.Reader | None = None) -> Loaded:
    """Read a file or a folder (recursively). Raises AttachmentError; never attaches part of a file.
    `reader`: a PDF reader process to share with other paths of the same attach."""
    if reader is None:
        with pdf.Reader() as reader:
            return load_path(path, reader)
    path = Path(path).expanduser()
    if not path.exists():
        raise AttachmentError(f"{_shown(path)}: no such file or folder")
    if path.is_dir():
        return _load_folder(path, reader)
    if not path.is_file():
        raise AttachmentError(f"{_shown(path)}: not a regular file")
    attachment, notices = read_file(path, one_line_text(path.name), reader)
    return Loaded((attachment,), tuple(notices))


def load_paths(paths: list[str | Path]) -> list[Loaded]:
    """`load_path` for each of several paths given at once (`ask --attach A --attach B`). Files
    given by themselves are named by their file name, as one path would be; where two such names
    clash (staging/notes.txt and production/notes.txt), each is named by the shortest end of its
    path that tells them apart, so both are attached and the model and the user can tell which."""
    with pdf.Reader() as reader:
        loaded = [load_path(path, reader) for path in paths]
    single = [i for i, (path, found) in enumerate(zip(paths, loaded))
              if not Path(path).expanduser().is_dir() and len(found.attachments) == 1]
    clashing = Counter(loaded[i].attachments[0].name for i in single)
    groups: dict[str, list[int]] = {}
    for i in single:
        name = loaded[i].attachments[0].name
        if clashing[name] > 1:
            groups.setdefault(name, []).append(i)
    for members in groups.values():
        parts = {i: Path(os.path.abspath(Path(paths[i]).expanduser())).parts for i in members}
        for i, own in parts.items():
            others = [p for j, p in parts.items() if j != i]
            depth = next((d for d in range(2, len(own) + 1) if all(p[-d:] != own[-d:] for p in others)), len(own))
            name = one_line_text("/".join(own[-depth:]))
            loaded[i] = replace(loaded[i], attachments=(replace(loaded[i].attachments[0], name=name),))
    return loaded


def read_file(path: Path, name: str, reader: pdf.Reader | None = None) -> tuple[Attachment, list[str]]:
    """One file as an Attachment called `name`, plus notices (an encoding fallback); a PDF is
    read by `reader` when given."""
    cancel.check()
    shown = one_line_text(name)
    is_pdf = path.suffix.lower() == ".pdf"
    limit = MAX_PDF_BYTES if is_pdf else MAX_TEXT_BYTES
    try:
        size = path.stat().st_size
        if size > limit:
            raise AttachmentError(f"{shown} is {_mib(size)}; a {'PDF' if is_pdf else 'text file'} "
                                  f"can be at most {_mib(limit)}")
        with path.open("rb") as file:
            data = file.read(limit + 1)  # the file may have grown since stat
    except OSError as exc:
        raise AttachmentError(f"{shown}: cannot read it ({exc.strerror or exc})") from None
    if len(data) > limit:
        raise AttachmentError(f"{shown} is over {_mib(limit)}; attach a smaller file")
    if not data:
        raise AttachmentError(f"{shown} is empty")
    notices = []
    if is_pdf:
        text, page_starts = pdf.extract_text(name, data, reader)
        return Attachment.from_text(name, text, kind="pdf", page_starts=page_starts), []
    if data.startswith(b"%PDF-"):
        try:
            text, page_starts = pdf.extract_text(name, data, reader)
            return Attachment.from_text(name, text, kind="pdf", page_starts=page_starts), []
        except (pdf.NotAPDFError, pdf.NoTextError):
            notices.append(f"{shown} starts with %PDF- but is not a PDF with text; read as text")
    text, decoded = decode_text(name, data)
    if not text.strip():
        raise AttachmentError(f"{shown} holds only whitespace")
    return Attachment.from_text(name, text), notices + decoded


def decode_text(name: str, data: bytes) -> tuple[str, list[str]]:
    """Bytes to text with "\\n" line endings: UTF-8, else Windows-1252 with a notice, else refused."""
    notices, shown = [], one_line_text(name)
    if data.startswith(UTF16_BOMS):
        text = _decode_or_refuse(name, data, "utf-16")
    elif b"\x00" in data[:SNIFF_BYTES]:
        raise BinaryFileError(f"{shown} is a binary file; attach text, Markdown, source code or PDF")
    else:
        try:
            text = data.decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            where = f"byte 0x{data[exc.start]:02X} at offset {exc.start}"
            text = _decode_or_refuse(name, data, "cp1252", f"neither UTF-8 nor Windows-1252 ({where})")
            notices.append(f"{shown} is not UTF-8 ({where}); read as Windows-1252")
    if "\x00" in text:
        raise BinaryFileError(f"{shown} is a binary file; attach text, Markdown, source code or PDF")
    return text.replace("\r\n", "\n").replace("\r", "\n"), notices


def _decode_or_refuse(name: str, data: bytes, codec: str, why: str = "") -> str:
    try:
        return data.decode(codec)
    except UnicodeDecodeError as exc:
        why = why or f"invalid {codec} at offset {exc.start}"
        raise AttachmentError(f"{one_line_text(name)} is not readable text: {why}") from None


def _load_folder(folder: Path, reader: pdf.Reader) -> Loaded:
    files = _folder_files(folder)
    attachments, notices, binary, total = [], [], 0, 0
    for path in files:
        name = one_line_text(f"{folder.name}/{path.relative_to(folder).as_posix()}")
        try:
            attachment, file_notices = read_file(path, name, reader)
        except BinaryFileError:
            binary += 1
            continue
        except cancel.AttachStopped:
            raise
        except AttachmentError as exc:
            notices.append(f"skipped {exc}")
            continue
        total += len(attachment.text.encode("utf-8"))
        if total > MAX_FOLDER_TEXT_BYTES:
            raise AttachmentError(f"{_shown(folder)} holds more than {_mib(MAX_FOLDER_TEXT_BYTES)} of text; "
                                  f"attach a smaller folder")
        attachments.append(attachment)
        notices.extend(file_notices)
    if binary:
        notices.append(f"skipped {binary} binary file{'s' if binary != 1 else ''} in {one_line_text(folder.name)}")
    if not attachments:
        why = f" ({'; '.join(notices)})" if notices else ""
        raise AttachmentError(f"{_shown(folder)} has no readable text files{why}")
    return Loaded(tuple(attachments), tuple(notices))


def _folder_files(folder: Path) -> list[Path]:
    """The folder's visible regular files, in a stable order, refused above MAX_FOLDER_FILES."""
    found: list[Path] = []
    # followlinks=False: a symlink loop cannot make the walk endless.
    for root, dirs, names in os.walk(folder):
        cancel.check()
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in SKIPPED_FOLDERS)
        for name in sorted(names):
            path = Path(root) / name
            if name.startswith(".") or not path.is_file():
                continue
            found.append(path)
            if len(found) > MAX_FOLDER_FILES:
                raise AttachmentError(f"{_shown(folder)} holds more than {MAX_FOLDER_FILES} files; "
                                      f"attach a smaller folder")
    return found


def _shown(path: Path) -> str:
    return one_line_text(str(path))


def _mib(size: int) -> str:
    return f"{size / 2**20:.0f} MiB" if size >= 2**20 else f"{size / 1024:.0f} KiB"
