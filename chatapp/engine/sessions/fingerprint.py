"""What must match for a saved KV cache to be loaded into the running backend.

A state is laid out for one model file, one context size, one KV type and one build of
llama.cpp (in-process), or for one server's build, model, context and chat template; anything
else is refused with the first difference found, in words. The backend says what to check
(`Backend.fingerprint`), in order, the most telling first.
"""

from __future__ import annotations

from collections.abc import Mapping

Fingerprint = dict[str, str | int | bool]
"""What a backend says must match (`Backend.fingerprint`), in the order it is checked."""

LABELS = {
    "model_sha256": "other model or quant",
    "model_id": "other model",
    "n_ctx": "other n_ctx",
    "kv_type": "other KV type",
    "flash_attn": "other flash-attention setting",
    "llama_cpp": "other llama.cpp build",
    "llama_cpp_python": "other llama-cpp-python version",
    "backend": "other backend",
    "server_build": "other llama-server build",
    "template_sha256": "other chat template",
}
INFORMATIONAL = ("model", "quant")
"""Keys that name what was saved, for the message, without being checked."""
IN_PROCESS = "in-process"
"""The backend of a fingerprint without a "backend" key: the in-process one states none."""


def model_id(fingerprint: Mapping[str, object]) -> str:
    """The model's identity for the sessions database: its sha256 in-process, the server's
    model path and size over HTTP."""
    return str(fingerprint.get("model_sha256") or fingerprint.get("model_id") or "")


def same_model(saved_id: str, saved: tuple[str, str], current_id: str, current: tuple[str, str]) -> bool:
    """Whether a session saved with model `saved_id` (named `saved`: name and quant) is on the
    same model now. Identities of one kind are compared (two sha256s, or two server paths with
    sizes); a session moving between backends has one of each, and is compared by name and quant."""
    if _is_sha256(saved_id) == _is_sha256(current_id):
        return saved_id == current_id
    return saved == current


def _is_sha256(identity: str) -> bool:
    return len(identity) == 64 and all(c in "0123456789abcdef" for c in identity)


def backend_of(fingerprint: Mapping[str, object]) -> str:
    backend = fingerprint.get("backend")
    return backend if isinstance(backend, str) and backend else IN_PROCESS


def mismatch(saved: Mapping[str, object], current: Fingerprint) -> str | None:
    """Why a state saved under `saved` can't load under `current`, or None when it can. A
    state from the other backend is said to be so first: its keys are not this backend's,
    and the same model must not read as "other model or quant"."""
    if backend_of(saved) != backend_of(current):
        return f"it was saved by the {backend_of(saved)} backend; this chat runs {backend_of(current)}"
    for key, value in current.items():
        if key in INFORMATIONAL or saved.get(key) == value:
            continue
        label = LABELS.get(key, f"other {key}")
        if key in ("model_sha256", "model_id"):
            model = " ".join(str(saved[k]) for k in INFORMATIONAL if isinstance(saved.get(k), str) and saved[k])
            return f"{label} ({model})" if model else label
        return f"{label} (state {saved.get(key, '?')}, now {value})"
    return None
