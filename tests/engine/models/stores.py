"""Other tools' model stores, built in a temporary folder from the real default model: a
Hugging Face hub cache (refs, snapshots linked to blobs), an Ollama store (a real manifest with
computed digests) and an LM Studio home behind a pointer file. Model files are hard links to
the real one where the file system allows, copies where not."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from chatapp.engine.filecache import hash_file

HF_REPO = "HuggingFaceTB/SmolLM2-135M-Instruct-GGUF"
HF_FILE = "smollm2-135m-instruct-q4_1.gguf"
HF_NAME = f"hf:{HF_REPO}:Q4_1"
OLLAMA_NAME = "ollama:smollm2:135m"
LMSTUDIO_NAME = "lmstudio:bartowski/SmolLM2-135M-Instruct-GGUF"
COMMIT = "0123456789abcdef0123456789abcdef01234567"


def place(model: Path, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    if target.exists():  # content-addressed: a blob of the same digest is already there
        return
    try:
        os.link(model, target)
    except OSError:
        shutil.copyfile(model, target)


@dataclass
class Stores:
    home: Path
    hub: Path
    ollama: Path
    lmstudio: Path

    def env(self) -> dict[str, str]:
        return {"HOME": str(self.home), "HF_HUB_CACHE": str(self.hub), "OLLAMA_MODELS": str(self.ollama),
                "LLAMA_CACHE": str(self.home / "llama-cache")}


def hf_repo(hub: Path, model: Path, repo_id: str = HF_REPO, files: tuple[str, ...] = (HF_FILE,),
            digest: str | None = None) -> Path:
    """models--ORG--REPO with one commit whose snapshot links each file to its blob."""
    repo = hub / f"models--{repo_id.replace('/', '--')}"
    digest = digest or hash_file(model)
    place(model, repo / "blobs" / digest)
    (repo / "refs").mkdir(parents=True, exist_ok=True)
    (repo / "refs" / "main").write_text(COMMIT)
    snapshot = repo / "snapshots" / COMMIT
    for name in files:
        link = snapshot / name
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(os.path.relpath(repo / "blobs" / digest, link.parent))
    return repo


def ollama_model(store: Path, model: Path, name: tuple[str, ...] = ("registry.ollama.ai", "library", "smollm2", "135m"),
                 digest: str | None = None, file_type: str = "Q4_1", projector: Path | None = None) -> Path:
    """A manifest and its blobs, as `ollama pull` leaves them; with `projector`, a vision model's
    projector layer too (its own blob, as Ollama keeps an mmproj)."""
    digest = digest or hash_file(model)
    place(model, store / "blobs" / f"sha256-{digest}")
    config = json.dumps({"model_format": "gguf", "model_family": "llama", "file_type": file_type}).encode()
    config_digest = hashlib.sha256(config).hexdigest()
    (store / "blobs" / f"sha256-{config_digest}").write_bytes(config)
    manifest = {
        "schemaVersion": 2, "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
        "config": {"mediaType": "application/vnd.docker.container.image.v1+json",
                   "digest": f"sha256:{config_digest}", "size": len(config)},
        "layers": [{"mediaType": "application/vnd.ollama.image.model", "digest": f"sha256:{digest}",
                    "size": model.stat().st_size}],
    }
    if projector is not None:
        projector_digest = hash_file(projector)
        place(projector, store / "blobs" / f"sha256-{projector_digest}")
        manifest["layers"].append({"mediaType": "application/vnd.ollama.image.projector",
                                   "digest": f"sha256:{projector_digest}", "size": projector.stat().st_size})
    path = store.joinpath("manifests", *name)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(manifest))
    return path


def build(root: Path, model: Path) -> Stores:
    home = root / "home"
    home.mkdir(parents=True, exist_ok=True)  # isolated_env may have made it: HOME is tmp_path/home
    stores = Stores(home, root / "hub", root / "ollama", root / "lmstudio-home")
    digest = hash_file(model)
    hf_repo(stores.hub, model, digest=digest)
    ollama_model(stores.ollama, model, digest=digest)
    place(model, stores.lmstudio / "models" / "bartowski" / "SmolLM2-135M-Instruct-GGUF"
          / "SmolLM2-135M-Instruct-Q4_1.gguf")
    (home / ".lmstudio-home-pointer").write_text(str(stores.lmstudio))
    return stores


def use_stores(root: Path, model: Path, monkeypatch) -> Stores:
    """Build the stores and point this process's environment (and chatapp's folders) at them."""
    built = build(root, model)
    for name, value in built.env().items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("XDG_DATA_HOME", str(root / "data"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(root / "cache"))
    return built


def snapshot(root: Path) -> dict[str, tuple]:
    """Everything that makes a tree what it is: each entry's type, mode, size, mtime, link
    target, inode, and the bytes of every small file (model files are compared by identity)."""
    seen = {}
    for folder, dirs, files in os.walk(root, followlinks=False):
        for name in sorted(dirs + files):
            path = Path(folder) / name
            info = path.lstat()
            target = os.readlink(path) if path.is_symlink() else None
            body = path.read_bytes() if path.is_file() and not path.is_symlink() and info.st_size < 1 << 20 else None
            seen[str(path.relative_to(root))] = (info.st_mode, info.st_size, info.st_mtime_ns, info.st_ino,
                                                 target, body)
    return seen
