"""chatapp.paths' reader of files chatapp did not write itself, and the readers that use it: a
named pipe, a device or a file past its cap is refused in one line before it is read. Each
read runs in a daemon thread with a deadline, so a regression fails instead of hanging."""

from __future__ import annotations

import os
import threading

import numpy as np
import pytest

from chatapp import paths
from chatapp.config import save_setting
from chatapp.engine.filecache import FileCache
from chatapp.engine.inside.neighbours import cache_file, cached_unit_rows
from chatapp.engine.filecache import file_sha256
from chatapp.errors import ConfigError

DEADLINE = 60.0


def within_deadline(call, *args):
    """call(*args)'s result, or its exception raised here; a failure when it does not return."""
    result: dict = {}

    def target():
        try:
            result["value"] = call(*args)
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            result["error"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(DEADLINE)
    assert not thread.is_alive(), f"{call.__name__} still waits after {DEADLINE:.0f} s"
    if "error" in result:
        raise result["error"]
    return result["value"]


def test_the_reader_refuses_what_is_no_regular_file_or_too_big(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    with pytest.raises(paths.RefusedFile) as caught:
        within_deadline(paths.read_capped, fifo, 100)
    assert caught.value.strerror == "it is a named pipe, not a regular file"
    with pytest.raises(paths.RefusedFile, match="it is a character device, not a regular file"):
        within_deadline(paths.read_capped, "/dev/zero", 100)
    with pytest.raises(paths.RefusedFile, match="it is a directory"):
        paths.read_capped(tmp_path, 100)
    big = tmp_path / "big"
    big.write_bytes(b"x" * 101)
    with pytest.raises(paths.RefusedFile) as caught:
        paths.read_capped(big, 100)
    assert caught.value.strerror == "it is 101 bytes, more than the 100 bytes chatapp reads of it"
    assert paths.read_capped(big, 101) == b"x" * 101
    with pytest.raises(FileNotFoundError):
        paths.read_capped(tmp_path / "none", 100)
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 200_000 + "]" * 200_000)
    with pytest.raises(ValueError, match="nested too deep"):
        paths.read_json_capped(deep, paths.MiB)


def test_setting_a_key_in_a_config_that_is_a_pipe_is_refused_and_leaves_it(tmp_path):
    config = tmp_path / "config.toml"
    os.mkfifo(config)
    with pytest.raises(ConfigError, match="it is a named pipe, not a regular file"):
        within_deadline(save_setting, "temperature", 0.5, config)
    assert config.is_fifo()


def test_a_cache_file_that_is_a_pipe_reads_as_empty(tmp_path):
    cache = FileCache("sha256", tmp_path)
    os.mkfifo(cache.path)
    model = tmp_path / "model"
    model.write_bytes(b"weights")
    assert within_deadline(cache.get, model) is None


def test_an_embeddings_cache_that_is_a_pipe_is_built_again(default_model_path):
    target = cache_file(file_sha256(default_model_path))
    target.parent.mkdir(parents=True, exist_ok=True)
    os.mkfifo(target)
    rows = within_deadline(cached_unit_rows, default_model_path)
    assert rows.dtype == np.float16 and rows.shape[0] > 1000
    assert target.is_file()  # the pipe was replaced by the built cache
