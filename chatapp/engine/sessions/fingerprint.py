"""What must match for a saved KV cache to be loaded into the running model.

A state is bytes laid out for one model file, one context size, one KV type and one build of
llama.cpp; anything else is refused with the first difference found, in words.
"""

from __future__ import annotations

from chatapp.engine.filecache import file_sha256

# (key, what to call a difference); checked in this order, the most telling first.
CHECKS = (
    ("model_sha256", "other model or quant"),
    ("n_ctx", "other n_ctx"),
    ("kv_type", "other KV type"),
    ("flash_attn", "other flash-attention setting"),
    ("llama_cpp", "other llama.cpp build"),
    ("llama_cpp_python", "other llama-cpp-python version"),
)


def of_engine(engine) -> dict[str, str | int | bool]:
    """The running engine's fingerprint. The model's sha256 is cached by file identity."""
    from chatapp.engine.llama import versions  # noqa: PLC0415 - loads llama_cpp, already loaded here

    info = engine.runtime.info
    found = versions()
    return {
        "model_sha256": file_sha256(engine.model_path),
        "model": engine.summary.name,
        "quant": engine.summary.quant,
        "n_ctx": info.n_ctx,
        "kv_type": info.kv_type,
        "flash_attn": info.flash_attn,
        "llama_cpp": found["llama.cpp"],
        "llama_cpp_python": found["llama-cpp-python"],
    }


def mismatch(saved: dict, current: dict) -> str | None:
    """Why a state saved under `saved` can't load under `current`, or None when it can."""
    for key, label in CHECKS:
        if saved.get(key) != current.get(key):
            if key == "model_sha256":
                model = " ".join(str(saved[k]) for k in ("model", "quant") if isinstance(saved.get(k), str))
                return f"{label} ({model})" if model else label
            return f"{label} (state {saved.get(key, '?')}, now {current.get(key)})"
    return None
