"""`chatapp models pull hf:ORG/REPO[:QUANT]` against a hub served on 127.0.0.1 (HF_ENDPOINT)
from the real default model: the pull lands in the shared hub cache, is found and chatted
with offline, resumes a dropped connection and an interrupted pull, and refuses a wrong
checksum, a gated repo, an unknown repo or quant, a repo with no GGUF and a full disk in one
line each, listing nothing half-written."""

from __future__ import annotations

import json
import shlex
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.cli.namespaces import namespace_run
from tests.engine.local.vision import build_projector
from tests.engine.models.fake_hub import FakeHub, HubRepo

REPO = "bartowski/SmolLM2-135M-Instruct-GGUF"
ASK = ("--json", "--temperature", "0", "--max-tokens", "4", "--ctx", "512", "--threads", "1")


@pytest.fixture
def hub(default_model_path):
    with FakeHub() as served:
        served.repos[REPO] = HubRepo({"SmolLM2-135M-Instruct-Q4_1.gguf": default_model_path,
                                      "SmolLM2-135M-Instruct-Q8_0.gguf": default_model_path})
        yield served


@pytest.fixture
def chatapp_run(tmp_path, isolated_dirs, hub):
    exe = Path(sys.executable).with_name("chatapp")
    cache = tmp_path / "hub-cache"
    env = {**os.environ, **isolated_dirs, "HOME": str(tmp_path), "HF_ENDPOINT": hub.url,
           "HF_HUB_CACHE": str(cache), "HF_HUB_DISABLE_TELEMETRY": "1", "HF_HUB_DISABLE_XET": "1", "COLUMNS": "200"}
    env.pop("HF_TOKEN", None)

    def run(*args: str, **extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(exe), *args], capture_output=True, text=True, env={**env, **extra}, timeout=300)

    run.env, run.cache = env, cache
    return run


def listed(run) -> dict[str, dict]:
    out = run("models", "list", "--json")
    assert out.returncode == 0, out.stderr
    return {row["name"]: row for row in json.loads(out.stdout) if row["source"] == "huggingface"}


def test_a_pull_lands_in_the_shared_cache_and_chats_offline(chatapp_run, default_model_path):
    pulled = chatapp_run("models", "pull", f"hf:{REPO}:Q4_1")
    assert pulled.returncode == 0, pulled.stderr
    path = Path(pulled.stdout.strip())
    assert path.is_relative_to(chatapp_run.cache) and path.read_bytes() == default_model_path.read_bytes()
    assert f"pulled hf:{REPO}:Q4_1 into {chatapp_run.cache} (sha256 verified)" in pulled.stderr
    assert list(listed(chatapp_run)) == [f"hf:{REPO}:Q4_1"]
    out = chatapp_run("ask", "--model", f"hf:{REPO}:Q4_1", "Name a colour.", *ASK, HF_HUB_OFFLINE="1")
    assert out.returncode == 0, out.stderr
    again = chatapp_run("models", "pull", "--if-missing", f"hf:{REPO}:Q4_1")
    assert again.returncode == 0 and "is present" in again.stderr


def test_without_a_quant_llama_cpps_rule_picks_q4_k_m_then_q8_0(chatapp_run, hub, default_model_path):
    pulled = chatapp_run("models", "pull", f"hf:{REPO}")
    assert pulled.returncode == 0, pulled.stderr
    assert Path(pulled.stdout.strip()).name == "SmolLM2-135M-Instruct-Q8_0.gguf"  # no Q4_K_M here: Q8_0
    hub.repos[REPO].files["SmolLM2-135M-Instruct-Q4_K_M.gguf"] = default_model_path
    pulled = chatapp_run("models", "pull", f"hf:{REPO}")
    assert Path(pulled.stdout.strip()).name == "SmolLM2-135M-Instruct-Q4_K_M.gguf"


def test_a_dropped_connection_is_resumed_and_checked(chatapp_run, hub):
    hub.drop_after = 10 << 20
    pulled = chatapp_run("models", "pull", f"hf:{REPO}:Q4_1")
    assert pulled.returncode == 0, pulled.stderr
    assert hub.ranges and hub.ranges[0].startswith("bytes=") and int(hub.ranges[0][6:].rstrip("-")) > 0
    assert f"hf:{REPO}:Q4_1" in listed(chatapp_run)


def test_an_interrupted_pull_lists_nothing_and_the_next_one_resumes(chatapp_run, hub):
    hub.delay = 0.02
    exe = Path(sys.executable).with_name("chatapp")
    # SIGINT as a terminal delivers it, even when this run was started in the background, where
    # the shell had it ignored (and Python installs no KeyboardInterrupt for an ignored signal).
    pulling = subprocess.Popen([str(exe), "models", "pull", f"hf:{REPO}:Q4_1"], env=chatapp_run.env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 120
    while not any(p.stat().st_size > 1 << 20 for p in chatapp_run.cache.rglob("*.incomplete")):
        assert time.monotonic() < deadline and pulling.poll() is None, "the pull never got going"
        time.sleep(0.1)
    pulling.send_signal(signal.SIGINT)
    _, err = pulling.communicate(timeout=60)
    assert pulling.returncode == 130 and "Traceback" not in err, err
    assert listed(chatapp_run) == {}
    hub.delay = 0.0
    resumed = chatapp_run("models", "pull", f"hf:{REPO}:Q4_1")
    assert resumed.returncode == 0, resumed.stderr
    assert hub.ranges, "the second pull started over instead of resuming"
    assert f"hf:{REPO}:Q4_1" in listed(chatapp_run)


def one_line(out: subprocess.CompletedProcess[str], code: int, needle: str) -> None:
    """One line says what went wrong (a progress bar may stand above it)."""
    assert out.returncode == code, out.stderr
    said = [line for line in out.stderr.splitlines() if line.startswith("chatapp: ")]
    assert len(said) == 1 and needle in said[0] and "Traceback" not in out.stderr, out.stderr


def test_a_wrong_checksum_is_refused_and_removed(chatapp_run, hub):
    hub.repos[REPO].wrong_sha = True
    one_line(chatapp_run("models", "pull", f"hf:{REPO}:Q4_1"), 2, "is not the hub's 000000000000")
    assert listed(chatapp_run) == {} and not list(chatapp_run.cache.rglob("blobs/*"))


def test_the_hubs_refusals_are_one_line_each(chatapp_run, hub, tmp_path):
    hub.repos["org/gated"] = HubRepo({"m-Q4_1.gguf": hub.repos[REPO].files["SmolLM2-135M-Instruct-Q4_1.gguf"]},
                                     gated=True)
    hub.repos["org/nogguf"] = HubRepo({})
    one_line(chatapp_run("models", "pull", "hf:org/gated"), 2, "is gated or private")
    one_line(chatapp_run("models", "pull", "hf:org/missing"), 2, "no such repository")
    one_line(chatapp_run("models", "pull", f"hf:{REPO}:Q2_K"), 2, "has no Q2_K GGUF (it has Q4_1, Q8_0)")
    one_line(chatapp_run("models", "pull", "hf:org/nogguf"), 2, "holds no GGUF file")
    one_line(chatapp_run("models", "pull", "hf:not a name"), 2, "is not a Hugging Face model name")
    one_line(chatapp_run("models", "pull", f"hf:{REPO}:Q4_1", HF_HUB_OFFLINE="1"), 2, "HF_HUB_OFFLINE")
    assert listed(chatapp_run) == {}


def test_a_full_disk_is_one_line_exit_1_and_lists_nothing(chatapp_run, tmp_path):
    """An 8 MiB tmpfs as the hub cache, mounted as root of new user and mount namespaces (no root
    needed): the pull meets the real ENOSPC."""
    tiny, out = tmp_path / "tiny", tmp_path / "out"
    tiny.mkdir()
    out.mkdir()
    exe, q = shlex.quote(str(Path(sys.executable).with_name("chatapp"))), shlex.quote
    script = f"""
mount -t tmpfs -o size=8m tmpfs {q(str(tiny))}
{exe} models pull hf:{REPO}:Q4_1 >{q(str(out / 'pull.out'))} 2>{q(str(out / 'pull.err'))} \\
    || echo $? > {q(str(out / 'pull.rc'))}
{exe} models list --json >{q(str(out / 'list.json'))} 2>{q(str(out / 'list.err'))}
"""
    run = namespace_run(script, {**chatapp_run.env, "HF_HUB_CACHE": str(tiny)})
    assert run.returncode == 0, run.stderr
    pulled = subprocess.CompletedProcess([], int((out / "pull.rc").read_text() or 0),
                                         (out / "pull.out").read_text(), (out / "pull.err").read_text())
    one_line(pulled, 1, "the disk is full")
    rows = json.loads((out / "list.json").read_text())
    assert not [row for row in rows if row["source"] == "huggingface"]


def test_a_split_model_is_pulled_whole(chatapp_run, hub, tmp_path, default_model_path):
    second = tmp_path / "part2.bin"
    second.write_bytes(b"GGUF" + bytes(4096))
    hub.repos["org/split"] = HubRepo({"big-Q4_1-00001-of-00002.gguf": default_model_path,
                                      "big-Q4_1-00002-of-00002.gguf": second})
    pulled = chatapp_run("models", "pull", "hf:org/split:Q4_1")
    assert pulled.returncode == 0, pulled.stderr
    first = Path(pulled.stdout.strip())
    assert first.name == "big-Q4_1-00001-of-00002.gguf"
    assert (first.parent / "big-Q4_1-00002-of-00002.gguf").read_bytes() == second.read_bytes()
    [row] = [row for name, row in listed(chatapp_run).items() if name.startswith("hf:org/split")]
    assert row["size_bytes"] == default_model_path.stat().st_size + second.stat().st_size


def test_a_vision_repos_projector_comes_with_the_model_checked_and_no_mmproj_leaves_it(
        chatapp_run, hub, tmp_path, default_model_path):
    """Issue 55: the F16 projector of several, from the repo's top for a quant kept in a folder,
    hashed like the model; `models info` then finds it; --no-mmproj pulls the model alone."""
    f16 = build_projector(tmp_path / "f16.gguf")
    bf16 = build_projector(tmp_path / "bf16.gguf", width=32, ff=64)
    hub.repos["org/vision"] = HubRepo({"Q4_1/vision-Q4_1.gguf": default_model_path, "mmproj-vision-BF16.gguf": bf16,
                                       "mmproj-vision-F16.gguf": f16, "README.md": f16})
    alone = chatapp_run("models", "pull", "--no-mmproj", "hf:org/vision:Q4_1")
    assert alone.returncode == 0, alone.stderr
    snapshot = Path(alone.stdout.strip()).parent.parent
    assert not list(snapshot.glob("mmproj*")) and "vision projector" not in alone.stderr
    pulled = chatapp_run("models", "pull", "--force", "hf:org/vision:Q4_1")
    assert pulled.returncode == 0, pulled.stderr
    assert "with its vision projector mmproj-vision-F16.gguf: it sees images" in pulled.stderr
    assert sorted(p.name for p in snapshot.glob("mmproj*")) == ["mmproj-vision-F16.gguf"]
    assert (snapshot / "mmproj-vision-F16.gguf").read_bytes() == f16.read_bytes()
    info = chatapp_run("models", "info", "hf:org/vision:Q4_1", "--json", HF_HUB_OFFLINE="1")
    assert info.returncode == 0, info.stderr
    assert Path(json.loads(info.stdout)["projector"]["path"]).name == "mmproj-vision-F16.gguf"
    hub.repos["org/vision"].sha256["mmproj-vision-F16.gguf"] = "1" * 64  # checked as the model is
    one_line(chatapp_run("models", "pull", "--force", "hf:org/vision:Q4_1"), 2, "is not the hub's 111111111111")


# Issue 35: the shared cache never holds a wrong file, and a hostile hub is one line.

SMALL = "org/small"
SMALL_FILE = "small-Q4_1.gguf"


@pytest.fixture
def small(hub, tmp_path):
    """A 4 MiB file of random bytes (the cache's rules do not read it): fast to pull twice."""
    data = tmp_path / "small.bin"
    data.write_bytes(b"GGUF" + os.urandom((4 << 20) - 4))
    hub.repos[SMALL] = HubRepo({SMALL_FILE: data})
    return data


def storage(run) -> Path:
    return run.cache / f"models--{SMALL.replace('/', '--')}"


def snapshot_files(run) -> list[Path]:
    return sorted(p for p in storage(run).glob("snapshots/*/*"))


def final_blobs(run) -> list[Path]:
    return sorted(p for p in storage(run).glob("blobs/*") if not p.name.endswith(".incomplete"))


def start_pull(run, *args: str) -> subprocess.Popen:
    exe = Path(sys.executable).with_name("chatapp")
    return subprocess.Popen([str(exe), "models", "pull", *args], env=run.env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def test_two_pulls_at_once_download_once_and_link_the_checked_blob(chatapp_run, hub, small):
    """Bug 1: the second pull waits on the blob's lock (the hub holds the first download until a
    second one begins, up to 10 s, so without the lock they would surely overlap)."""
    hub.overlap_wait, hub.delay = 10.0, 0.002
    first, second = start_pull(chatapp_run, f"hf:{SMALL}"), start_pull(chatapp_run, f"hf:{SMALL}")
    for pulling in (first, second):
        _, err = pulling.communicate(timeout=180)
        assert pulling.returncode == 0 and "Traceback" not in err, err
    assert len(hub.downloads) == 1, hub.downloads
    digest = hub.repos[SMALL].digest(SMALL_FILE)
    [blob] = final_blobs(chatapp_run)
    assert blob.name == digest and blob.read_bytes() == small.read_bytes()
    assert [p.read_bytes() == small.read_bytes() for p in snapshot_files(chatapp_run)] == [True]
    assert (chatapp_run.cache / ".locks" / storage(chatapp_run).name / f"{digest}.lock").exists()


def test_a_pull_waits_while_huggingface_hub_holds_the_blobs_lock(chatapp_run, hub, small):
    """Bug 1: the lock is huggingface_hub's own (.locks/models--ORG--REPO/SHA256.lock)."""
    from huggingface_hub.utils import WeakFileLock

    digest = hub.repos[SMALL].digest(SMALL_FILE)
    lock = chatapp_run.cache / ".locks" / storage(chatapp_run).name / f"{digest}.lock"
    lock.parent.mkdir(parents=True)
    with WeakFileLock(lock):
        pulling = start_pull(chatapp_run, f"hf:{SMALL}")
        time.sleep(4)
        assert pulling.poll() is None and hub.downloads == [] and not list(chatapp_run.cache.rglob("*.incomplete"))
    _, err = pulling.communicate(timeout=120)
    assert pulling.returncode == 0, err
    assert [blob.read_bytes() == small.read_bytes() for blob in final_blobs(chatapp_run)] == [True]


def test_an_etag_that_names_another_file_is_refused_and_nothing_is_linked(chatapp_run, hub, small):
    """Bug 2: the hub's X-Linked-Etag disagrees with the listing's sha256."""
    hub.repos[SMALL].etag[SMALL_FILE] = "a" * 64
    one_line(chatapp_run("models", "pull", f"hf:{SMALL}"), 2, "the hub serves aaaaaaaaaaaa… but its listing says")
    assert final_blobs(chatapp_run) == [] and snapshot_files(chatapp_run) == []


def test_a_file_kept_in_git_is_checked_against_its_blob_id_and_not_called_sha256_verified(chatapp_run, hub, small):
    """Bug 2: a GGUF the listing marks non-LFS has no sha256; its git blob id is what is checked."""
    hub.repos[SMALL].in_git.add(SMALL_FILE)
    pulled = chatapp_run("models", "pull", f"hf:{SMALL}")
    assert pulled.returncode == 0, pulled.stderr
    assert "(git blob sha1 verified)" in pulled.stderr and "sha256" not in pulled.stderr
    [blob] = final_blobs(chatapp_run)
    assert blob.name == hub.repos[SMALL].git_sha1(SMALL_FILE) and Path(pulled.stdout.strip()).resolve() == blob

    def wrong_blob_id(listing: dict) -> dict:
        for sibling in listing["siblings"]:
            sibling["blobId"] = "0" * 40
        return listing

    hub.repos["org/wrong"] = HubRepo({SMALL_FILE: small}, in_git={SMALL_FILE}, listing=wrong_blob_id,
                                     etag={SMALL_FILE: "0" * 40})
    one_line(chatapp_run("models", "pull", "hf:org/wrong"), 2, "is not the hub's 000000000000")
    assert not list(chatapp_run.cache.glob("models--org--wrong/blobs/*"))


@pytest.mark.parametrize("left", ["whole", "wrong", "too long"])
def test_a_partial_file_that_is_complete_or_too_long_is_hashed_or_restarted(chatapp_run, hub, small, left):
    """Bug 3: a pull stopped while hashing leaves a full-size .incomplete; the next pull (and
    --force) asked for `Range: bytes=SIZE-`, got 416 and failed, for good."""
    digest = hub.repos[SMALL].digest(SMALL_FILE)
    blobs = storage(chatapp_run) / "blobs"
    blobs.mkdir(parents=True)
    data = small.read_bytes()
    kept = {"whole": data, "wrong": bytes(len(data)), "too long": data + b"more"}[left]
    (blobs / f"{digest}.incomplete").write_bytes(kept)
    for args in ([], ["--force"]):
        pulled = chatapp_run("models", "pull", *args, f"hf:{SMALL}")
        assert pulled.returncode == 0, pulled.stderr
        assert [blob.read_bytes() == data for blob in final_blobs(chatapp_run)] == [True]
    assert not list(blobs.glob("*.incomplete"))
    assert len(hub.downloads) == (1 if left == "whole" else 2)  # --force downloads again


def test_a_range_other_than_the_one_asked_for_starts_the_file_again(chatapp_run, hub, small):
    """A 206 from another offset than the partial's end was written as if it were the file's start."""
    hub.drop_after, hub.range_off_by = 1 << 20, 1000
    pulled = chatapp_run("models", "pull", f"hf:{SMALL}")
    assert pulled.returncode == 0, pulled.stderr
    assert hub.ranges and [blob.read_bytes() == small.read_bytes() for blob in final_blobs(chatapp_run)] == [True]


def test_a_body_that_runs_past_the_listed_size_is_cut_there(chatapp_run, hub, small):
    """Bug 3: a body that never ended was written to 300 MB for a 1 MiB file."""
    hub.endless = 256 << 20
    pulled = chatapp_run("models", "pull", f"hf:{SMALL}")
    assert pulled.returncode == 0, pulled.stderr
    [blob] = final_blobs(chatapp_run)
    assert blob.stat().st_size == small.stat().st_size and blob.read_bytes() == small.read_bytes()


def test_a_hub_that_stops_sending_ends_in_one_line(chatapp_run, hub, small):
    """Bug 3 and 7: a stalled body (1 s without a byte counts as dropped here) is retried, then one line."""
    hub.stall = 3.0
    one_line(pull_patched(chatapp_run, "pull.TIMEOUT = 1.0"), 1, "the connection to the hub failed")
    assert final_blobs(chatapp_run) == [] and snapshot_files(chatapp_run) == []


def pull_patched(run, patch: str) -> subprocess.CompletedProcess[str]:
    """`chatapp models pull hf:org/small` with hub_pull's limits set by `patch` (Python)."""
    code = (f"import sys; import chatapp.engine.models.hub_pull as pull; {patch}; from chatapp.cli import main; "
            "sys.argv = ['chatapp', 'models', 'pull', 'hf:org/small']; main()")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=run.env, timeout=120)


@pytest.mark.parametrize(("what", "patch", "needle"), [
    ("listing", "pull.LISTING_DEADLINE = 2.0",
     "the hub did not send hf:org/small's file listing within 2 s (it trickled or stalled); nothing was downloaded"),
    ("file", "pull.SLOW_WINDOW = 2.0; pull.RETRIES = 2",
     "the hub sent hf:org/small small-Q4_1.gguf slower than 64.0 KiB in 2 s, 2 of 2 tries"),
])
def test_a_hub_that_trickles_its_answer_ends_in_one_line(chatapp_run, hub, small, what, patch, needle):
    """Debatable point: a slow-loris hub (a byte every 0.1 s, headers included) never let a read
    wait for the timeout, so a pull had no end. Here the limits are a few seconds."""
    hub.trickle[what] = 0.1
    started = time.monotonic()
    one_line(pull_patched(chatapp_run, patch), 1, needle)
    assert time.monotonic() - started < 30
    assert final_blobs(chatapp_run) == [] and snapshot_files(chatapp_run) == []


def _siblings(edit):
    def listing(data: dict) -> dict:
        gguf = next(s for s in data["siblings"] if s["rfilename"].endswith(".gguf"))
        edit(gguf, data)
        return data
    return listing


HOSTILE_LISTINGS = {
    "not JSON": (lambda data: b"<html>rate limited</html>", "it is not JSON"),
    "nested 100,000 deep": (lambda data: b"[" * 100_000 + b"]" * 100_000, "nested too deep"),
    "siblings as an object": (lambda data: {**data, "siblings": {SMALL_FILE: {}}}, "`siblings` is not a list"),
    "lfs.size as a string": (_siblings(lambda s, d: s["lfs"].update(size=str(s["lfs"]["size"]))),
                             "is not a number of bytes"),
    "an absolute rfilename": (_siblings(lambda s, d: s.update(rfilename="/tmp/evil-Q4_1.gguf")),
                              "is not a safe relative path"),
    "a rfilename with ..": (_siblings(lambda s, d: s.update(rfilename="../../evil-Q4_1.gguf")),
                            "is not a safe relative path"),
    "lfs.sha256 with ../": (_siblings(lambda s, d: s["lfs"].update(sha256="../../../../../../tmp/x")),
                            "is not 64 hex digits"),
    "sha with ../": (lambda data: {**data, "sha": "../../x"}, "is not a commit hash"),
}


@pytest.mark.parametrize("case", list(HOSTILE_LISTINGS))
def test_a_listing_that_cannot_be_used_is_one_line_before_any_download(chatapp_run, hub, small, case):
    """Bug 3 and 7: the listing is checked before a byte is downloaded."""
    hub.repos[SMALL].listing, needle = HOSTILE_LISTINGS[case]
    one_line(chatapp_run("models", "pull", f"hf:{SMALL}"), 2, needle)
    assert hub.downloads == [] and final_blobs(chatapp_run) == [] and snapshot_files(chatapp_run) == []


def test_a_listing_without_pointer_size_is_pulled(chatapp_run, hub, small):
    """Bug 7: pointerSize is not needed to pull (it crashed huggingface_hub's ModelInfo)."""
    hub.repos[SMALL].listing = _siblings(lambda s, d: s["lfs"].pop("pointerSize"))
    pulled = chatapp_run("models", "pull", f"hf:{SMALL}")
    assert pulled.returncode == 0 and "(sha256 verified)" in pulled.stderr, pulled.stderr


def test_a_redirect_to_itself_is_one_line(chatapp_run, hub, small):
    hub.redirect_to_self = True
    one_line(chatapp_run("models", "pull", f"hf:{SMALL}"), 2, "redirects in a loop")
    assert final_blobs(chatapp_run) == [] and snapshot_files(chatapp_run) == []


def test_a_ref_that_is_not_utf8_is_one_note_and_the_other_repos_are_listed(chatapp_run, default_model_path):
    """Bug 7: huggingface_hub's scan_cache_dir raised UnicodeDecodeError and `models list` crashed."""
    from tests.engine.models.fake_hub import COMMIT

    for repo, ref in (("good", COMMIT.encode()), ("bad", b"\xff\xfe\xfd")):
        folder = chatapp_run.cache / f"models--org--{repo}"
        (folder / "blobs").mkdir(parents=True)
        (folder / "blobs" / ("a" * 64)).symlink_to(default_model_path)
        (folder / "snapshots" / COMMIT).mkdir(parents=True)
        (folder / "snapshots" / COMMIT / "m-Q4_1.gguf").symlink_to(f"../../blobs/{'a' * 64}")
        (folder / "refs").mkdir()
        (folder / "refs" / "main").write_bytes(ref)
    out = chatapp_run("models", "list", "--json")
    assert out.returncode == 0 and "Traceback" not in out.stderr, out.stderr
    names = [row["name"] for row in json.loads(out.stdout) if row["source"] == "huggingface"]
    assert names == ["hf:org/good:Q4_1"]
    assert "models--org--bad: a ref in it is not UTF-8 text" in out.stderr


def test_many_folders_that_are_no_repo_are_one_note(chatapp_run, default_model_path):
    """Debatable point: 100,000 folders that are not a repo's (a cache shared with other files)
    printed 100,000 notes. Each kind is summarized: those folders in one line, damaged repos a
    line each for the first few and one line for the rest."""
    from tests.engine.models.fake_hub import COMMIT

    folder = chatapp_run.cache / "models--org--good"
    (folder / "blobs").mkdir(parents=True)
    (folder / "blobs" / ("a" * 64)).symlink_to(default_model_path)
    (folder / "snapshots" / COMMIT).mkdir(parents=True)
    (folder / "snapshots" / COMMIT / "m-Q4_1.gguf").symlink_to(f"../../blobs/{'a' * 64}")
    for n in range(2000):
        (chatapp_run.cache / f"not-a-repo-{n:04}").mkdir()
    for n in range(5):
        (chatapp_run.cache / f"models--org--broken{n}").mkdir()  # no snapshots folder
    out = chatapp_run("models", "list", "--json")
    assert out.returncode == 0 and "Traceback" not in out.stderr, out.stderr
    assert [row["name"] for row in json.loads(out.stdout) if row["source"] == "huggingface"] == ["hf:org/good:Q4_1"]
    notes = [line for line in out.stderr.splitlines() if line.startswith("chatapp: note:")]
    assert len(notes) == 5, out.stderr  # 3 damaged repos, 2 more counted, the 2,000 folders
    assert sum("Snapshots dir doesn't exist" in note for note in notes) == 3
    assert "2 more damaged repos, passed over like these" in notes[3]
    assert "2,000 entries are not a repo's folder (models--ORG--REPO), passed over: 'not-a-repo-0000', " \
           "'not-a-repo-0001', 'not-a-repo-0002', …" in notes[4]
