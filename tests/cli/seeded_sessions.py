"""A session database seeded with one known session, for the sessions commands (no model needed)."""

from __future__ import annotations

from chatapp import paths
from chatapp.engine.events import Message
from chatapp.engine.sessions.store import ModelIdentity, SessionStore, Snapshot, TurnRow


def seed() -> SessionStore:
    store = SessionStore.open(paths.sessions_dir())
    model = ModelIdentity("smollm2-135m-instruct", "/m.gguf", "ab" * 32, "Q4_1")
    messages = [Message("system", "Be brief."), Message("user", "Hi [bold]there[/]"), Message("assistant", "Hello!"),
                Message("user", "More?"), Message("assistant", "Sure", stopped=True)]
    for n, idx in enumerate((2, 4), 1):
        record = {"reply": messages[idx].content, "prompt_tokens": 30 * n, "cached_tokens": 10 * (n - 1),
                  "prefill_tokens": 30 * n - 10 * (n - 1), "restored_tokens": 10 if n == 2 else 0,
                  "prefill_tps": 1234.5, "decode_tps": 88.8, "ttft_ms": 42.0, "decode_tokens": 5,
                  "finish_reason": "stop" if n == 1 else "stopped", "quant": "Q4_1", "kv_type": "f16",
                  "backend": "CPU", "model": model.name}
        store.save(Snapshot("work", model, messages[:idx + 1], 1, 30 * n + 5),
                   TurnRow(idx, "CPU", record["prefill_tokens"], 20.0, record))
    store.save(Snapshot("empty one", model, messages[:1], 1, 0))
    return store
