"""Writes sessions.db with chatapp's schema 3 into the folder given, as tests/data/sessions/schema3.db
was made: run with a checkout of the commit before trees first on PYTHONPATH."""
import sys
from pathlib import Path
from chatapp.engine.events import Message
from chatapp.engine.sessions.store import ModelIdentity, SessionStore, Snapshot, TurnRow
from chatapp.engine.sessions.schema import SCHEMA_VERSION
assert SCHEMA_VERSION == 3
out = Path(sys.argv[1])
store = SessionStore.open(out)
model = ModelIdentity("SmolLM2-135M-Instruct", "/models/SmolLM2-135M-Instruct.Q4_1.gguf", "ab" * 32, "Q4_1")
msgs = [Message("system", "You are a concise assistant."), Message("user", "What is a KV cache?"),
        Message("assistant", "The keys and values of past tokens, kept so they are not computed again."),
        Message("user", "And prefill?"),
        Message("assistant", "Computing the prompt's tokens in parallel.", stopped=True)]
record = {"reply": msgs[2].content, "prompt_tokens": 30, "prefill_tokens": 30, "prefill_ms": 40.0}
saved = store.save(Snapshot("work", model, msgs[:3], 1, 50), TurnRow(2, "CPU", 30, 40.0, record))
store.save(Snapshot("work", model, msgs, 1, 80), TurnRow(4, "CPU", 12, 20.0, {**record, "prefill_tokens": 12}),
           base=saved.revision)
store.save(Snapshot("no system", model, [Message("user", "hi"), Message("assistant", "hello")], 0, 10))
store.save(Snapshot("empty", model, [Message("system", "x")], 1, 0))
