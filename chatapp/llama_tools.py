"""llama.cpp's own programs (llama-server, rpc-server, llama-cli, llama-bench, llama-perplexity,
llama-quantize), built from the llama.cpp sources that the installed llama-cpp-python vendors,
so they run the same code as the in-process backend.

llama-cpp-python is source-only on PyPI, and its sdist carries llama.cpp. `ensure_tools()`
fetches that sdist with pip (its cache applies), builds the programs with CMake once, and
keeps them under the user cache folder keyed by the llama-cpp-python version and the build
options; later calls return at once. Tests (the remote-backend fixture) and benchmarks
(chatapp against llama-cli) share it:

    python -m chatapp.llama_tools            # build if needed, print the folder
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import platform
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
from importlib import metadata
from pathlib import Path

import platformdirs

from chatapp.private import make_private_dir

TARGETS = {"llama-server": "llama-server", "rpc-server": "ggml-rpc-server", "llama-cli": "llama-cli",
           "llama-bench": "llama-bench", "llama-perplexity": "llama-perplexity", "llama-quantize": "llama-quantize"}
"""Program name -> its CMake target (and file name under build/bin)."""
TOOLS = tuple(TARGETS)
CMAKE_OPTIONS = (
    "-DCMAKE_BUILD_TYPE=Release",
    "-DBUILD_SHARED_LIBS=OFF",  # self-contained programs; the kernels are the same as the bindings' .so
    "-DLLAMA_CURL=OFF",
    "-DLLAMA_OPENSSL=OFF",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_BUILD_TOOLS=ON",
    "-DLLAMA_BUILD_SERVER=ON",
    "-DLLAMA_BUILD_UI=OFF",
    "-DLLAMA_USE_PREBUILT_UI=OFF",  # it would download the web UI; chatapp needs only the API
    "-DGGML_RPC=ON",  # rpc-server, and llama-server --rpc
) + (NO_AMX_OPTIONS := (
    # ggml's AMX matmul kernels segfault on CPUs that report AMX under some hypervisors (seen here:
    # ggml_backend_amx_mul_mat on every batch of a few tokens). GGML_NATIVE's -march=native would turn
    # them on, so they are switched off explicitly; the Makefile builds llama-cpp-python the same way.
    "-DCMAKE_C_FLAGS=-mno-amx-tile -mno-amx-int8 -mno-amx-bf16",
    "-DCMAKE_CXX_FLAGS=-mno-amx-tile -mno-amx-int8 -mno-amx-bf16",
) if platform.machine().lower() in ("x86_64", "amd64") else ())


class BuildError(RuntimeError):
    pass


def binding_version() -> str:
    return metadata.version("llama-cpp-python")


def tools_dir(version: str | None = None) -> Path:
    """Where the programs for this llama-cpp-python version and these options live."""
    version = version or binding_version()
    options = hashlib.sha256("\n".join(CMAKE_OPTIONS).encode()).hexdigest()[:8]
    return platformdirs.user_cache_path("chatapp") / "llama-tools" / f"{version}-{options}"


def tool_path(name: str, version: str | None = None) -> Path:
    return tools_dir(version) / name


def built(version: str | None = None) -> bool:
    folder = tools_dir(version)
    return all(os.access(folder / name, os.X_OK) for name in TOOLS)


def _log(message: str) -> None:
    print(f"[llama-tools] {message}", file=sys.stderr, flush=True)


def _run(command: list[str], cwd: Path | None = None) -> None:
    _log(" ".join(command))
    done = subprocess.run(command, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, errors="replace")
    if done.returncode != 0:
        tail = "\n".join(done.stdout.splitlines()[-40:])
        raise BuildError(f"{command[0]} failed (exit {done.returncode}):\n{tail}")


def _fetch_sources(version: str, work: Path) -> Path:
    """The vendored llama.cpp folder from llama-cpp-python's sdist."""
    _run([sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:", "--disable-pip-version-check",
          "--no-input", "-d", str(work), f"llama-cpp-python=={version}"])
    archives = sorted(work.glob("llama_cpp_python-*.tar.gz"))
    if len(archives) != 1:
        raise BuildError(f"pip download left {len(archives)} sdists in {work}")
    with tarfile.open(archives[0]) as archive:
        archive.extractall(work, filter="data")
    source = work / f"llama_cpp_python-{version}" / "vendor" / "llama.cpp"
    if not (source / "CMakeLists.txt").is_file():
        raise BuildError(f"the sdist of llama-cpp-python {version} has no vendored llama.cpp")
    return source


def ensure_tools(version: str | None = None, jobs: int | None = None) -> Path:
    """Build the programs unless they are cached; returns their folder. Safe across processes."""
    version = version or binding_version()
    folder = tools_dir(version)
    if built(version):
        return folder
    make_private_dir(folder.parent)
    lock_fd = os.open(folder.parent / f".{folder.name}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    with os.fdopen(lock_fd, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # a second process waits for the first build
        if built(version):
            return folder
        _log(f"building {', '.join(TOOLS)} from llama-cpp-python {version}'s llama.cpp "
             "(once; about 15 minutes on 2 cores)")
        with tempfile.TemporaryDirectory(prefix="llama-tools-") as tmp:
            work = Path(tmp)
            source = _fetch_sources(version, work)
            build = work / "build"
            _run(["cmake", "-S", str(source), "-B", str(build), *CMAKE_OPTIONS])
            _run(["cmake", "--build", str(build), "--config", "Release", "-j", str(jobs or os.cpu_count() or 2),
                  "--target", *TARGETS.values()])
            staging = Path(tempfile.mkdtemp(dir=folder.parent, prefix=f".{folder.name}."))
            try:
                for name, target in TARGETS.items():
                    shutil.copy2(build / "bin" / target, staging / name)
                    os.chmod(staging / name, 0o700)  # the cache is private: no tightening notice later
                with contextlib.suppress(FileNotFoundError):
                    shutil.rmtree(folder)
                os.replace(staging, folder)
            except BaseException:
                shutil.rmtree(staging, ignore_errors=True)
                raise
    _log(f"built into {folder}")
    return folder


def templates_dir(version: str | None = None) -> Path:
    """The chat templates llama.cpp ships (`models/templates/*.jinja`), from the same sdist the
    programs are built from, extracted once into the user cache; later calls return at once."""
    version = version or binding_version()
    folder = platformdirs.user_cache_path("chatapp") / "llama-sources" / version / "templates"
    if any(folder.glob("*.jinja")):
        return folder
    make_private_dir(folder.parent)
    lock_fd = os.open(folder.parent / ".templates.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    with os.fdopen(lock_fd, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if any(folder.glob("*.jinja")):
            return folder
        with tempfile.TemporaryDirectory(prefix="llama-sources-") as tmp:
            source = _fetch_sources(version, Path(tmp))
            staging = Path(tempfile.mkdtemp(dir=folder.parent, prefix=".templates."))
            for template in (source / "models" / "templates").glob("*.jinja"):
                shutil.copy2(template, staging / template.name)
            with contextlib.suppress(FileNotFoundError):
                shutil.rmtree(folder)
            os.replace(staging, folder)
    return folder


def main() -> None:
    # A terminated build (the test suite stops its background one when the run ends first) leaves
    # its temporary folder behind unless SIGTERM unwinds like an exception: the cmake child is
    # killed by subprocess.run and the TemporaryDirectory removed.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        print(ensure_tools())
    except (BuildError, OSError) as exc:
        print(f"llama-tools: {exc}", file=sys.stderr)
        raise SystemExit(1) from None


if __name__ == "__main__":
    main()
