"""Reading attachments, and every kind of bad input getting one clear line and nothing half-way."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from chatapp.engine.retrieval import loading
from chatapp.engine.retrieval.document import Attachment
from chatapp.engine.retrieval.loading import load_path, load_paths
from chatapp.errors import AttachmentError
from tests.engine.retrieval.conftest import DOCS, make_pdf
from tests.engine.retrieval.refusals import refused



def test_a_text_file_keeps_its_text_and_a_sha256_of_it(tmp_path):
    path = tmp_path / "notes.md"
    path.write_bytes(b"# Notes\r\nline two\r\n")
    (attachment,) = load_path(path).attachments
    assert attachment.name == "notes.md"
    assert attachment.text == "# Notes\nline two\n"  # CRLF read as LF, so line numbers match an editor
    assert attachment.sha256 == hashlib.sha256(b"# Notes\nline two\n").hexdigest()
    assert attachment.line_count == 2
    assert Attachment.from_record(attachment.to_record()) == attachment


def test_a_saved_attachment_whose_text_changed_is_refused():
    record = Attachment.from_text("a.txt", "original").to_record()
    record["text"] = "tampered"
    with pytest.raises(AttachmentError, match="does not match its sha256"):
        Attachment.from_record(record)


def test_a_missing_file(tmp_path):
    assert "no such file or folder" in refused(tmp_path / "nope.txt")


def test_a_binary_file(tmp_path):
    path = tmp_path / "image.png"
    path.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256)))
    assert "binary" in refused(path)


def test_a_200_mb_file_is_refused_by_its_size_without_being_read(tmp_path, monkeypatch):
    path = tmp_path / "huge.log"
    with path.open("wb") as file:
        file.truncate(200 * 2**20)  # sparse: costs no disk

    def no_reading(*args, **kwargs):
        raise AssertionError("the file was opened")

    monkeypatch.setattr(Path, "open", no_reading)
    line = refused(path)
    assert "huge.log is 200 MiB" in line and "at most 8 MiB" in line


def test_an_empty_file(tmp_path):
    path = tmp_path / "empty.txt"
    path.write_text("")
    assert "is empty" in refused(path)


def test_windows_1252_text_is_read_with_a_notice(tmp_path):
    path = tmp_path / "menu.txt"
    path.write_bytes("Café crème – 3 €\n".encode("cp1252"))
    loaded = load_path(path)
    assert loaded.attachments[0].text == "Café crème – 3 €\n"
    assert loaded.notices == ("menu.txt is not UTF-8 (byte 0xE9 at offset 3); read as Windows-1252",)


def test_bytes_that_are_neither_utf8_nor_windows_1252_are_refused(tmp_path):
    path = tmp_path / "odd.txt"
    path.write_bytes(b"abc \x81\x8d\x8f\x90 def\n")  # undefined in Windows-1252, invalid in UTF-8
    assert "neither UTF-8 nor Windows-1252 (byte 0x81 at offset 4)" in refused(path)


def test_utf16_with_a_byte_order_mark_is_text(tmp_path):
    path = tmp_path / "wide.txt"
    path.write_bytes("héllo\r\nwörld\r\n".encode("utf-16"))
    assert load_path(path).attachments[0].text == "héllo\nwörld\n"


def test_a_pdf_with_text_keeps_its_pages(tmp_path):
    path = tmp_path / "notes.pdf"
    path.write_bytes(make_pdf([["Heron staging notes", "The server runs on port 8443."], [], ["Page three (last)."]]))
    (attachment,) = load_path(path).attachments
    assert attachment.kind == "pdf"
    assert attachment.text == "Heron staging notes\nThe server runs on port 8443.\n\n\n\nPage three (last)."
    assert attachment.page_starts == (1, 4, 6)
    assert [attachment.page_of_line(n) for n in (1, 2, 4, 6)] == [1, 1, 2, 3]


def test_a_pdf_without_text(tmp_path):
    path = tmp_path / "scan.pdf"
    path.write_bytes(make_pdf([[], []]))
    assert "scan.pdf has no extractable text" in refused(path)


def test_a_damaged_pdf(tmp_path):
    path = tmp_path / "broken.pdf"
    path.write_bytes(b"%PDF-1.7\n1 0 obj << /Type /Catalog >> garbage")
    assert "broken.pdf is not a readable PDF" in refused(path)


def test_a_folder_attaches_its_visible_text_files_and_counts_what_it_skipped(tmp_path):
    folder = tmp_path / "project"
    (folder / "src").mkdir(parents=True)
    (folder / ".git").mkdir()
    (folder / "__pycache__").mkdir()
    (folder / "README.md").write_text("# Project\n")
    (folder / "src" / "app.py").write_text("print('hi')\n")
    (folder / "src" / "guide.pdf").write_bytes(make_pdf([["A guide."]]))
    (folder / ".env").write_text("SECRET=1\n")
    (folder / ".git" / "config").write_text("[core]\n")
    (folder / "__pycache__" / "app.cpython-311.pyc").write_bytes(b"\x00\x01")
    (folder / "logo.png").write_bytes(b"\x89PNG\x00\x00")
    (folder / "scan.pdf").write_bytes(make_pdf([[]]))
    loaded = load_path(folder)
    assert [a.name for a in loaded.attachments] == ["project/README.md", "project/src/app.py", "project/src/guide.pdf"]
    assert loaded.notices == ("skipped project/scan.pdf has no extractable text (scanned pages need OCR first)",
                              "skipped 1 binary file in project")


def test_a_folder_with_nothing_readable(tmp_path):
    folder = tmp_path / "assets"
    folder.mkdir()
    (folder / "a.bin").write_bytes(b"\x00" * 10)
    (folder / ".hidden.txt").write_text("not visited")
    line = refused(folder)
    assert "assets has no readable text files (skipped 1 binary file in assets)" in line
    empty = tmp_path / "empty"
    empty.mkdir()
    assert "empty has no readable text files" in refused(empty)


def test_a_folder_with_too_many_files_is_refused_before_reading_them(tmp_path, monkeypatch):
    monkeypatch.setattr(loading, "MAX_FOLDER_FILES", 3)
    for i in range(4):
        (tmp_path / f"{i}.txt").write_text("x")
    assert "holds more than 3 files" in refused(tmp_path)


def test_the_document_set_loads_as_utf8_without_notices():
    loaded = load_path(DOCS)
    assert [a.name for a in loaded.attachments] == [
        "docs/httpcore.md", "docs/llama-cpp-python.md", "docs/psutil.rst", "docs/rich.md", "docs/typer.md"]
    assert loaded.notices == ()


def test_files_given_together_with_one_name_are_told_apart_by_their_paths(tmp_path):
    for folder in ("a/staging", "b/staging", "production"):
        (tmp_path / folder).mkdir(parents=True)
        (tmp_path / folder / "notes.txt").write_text(f"{folder}\n")
    (tmp_path / "other.md").write_text("other\n")
    loaded = load_paths([tmp_path / "a/staging/notes.txt", tmp_path / "b/staging/notes.txt",
                         tmp_path / "production/notes.txt", tmp_path / "other.md"])
    assert [one.attachments[0].name for one in loaded] == [
        "a/staging/notes.txt", "b/staging/notes.txt", "production/notes.txt", "other.md"]
    assert [one.attachments[0].text for one in loaded][:3] == ["a/staging\n", "b/staging\n", "production\n"]
