"""Writes sessions.db with chatapp's schema 6 into the folder given, as tests/data/sessions/schema6.db
was made: run with a checkout of the commit before per-session choices (1f1d612) first on PYTHONPATH.
A tree with a thought kept apart, a branch beside it, a draft, a scored reply and a turn record."""
import sys
from pathlib import Path
from chatapp.engine.chat.tree import MessageTree
from chatapp.engine.events import Message
from chatapp.engine.sessions.store import ModelIdentity, SessionStore, Snapshot, TurnRow
from chatapp.engine.sessions.schema import SCHEMA_VERSION
assert SCHEMA_VERSION == 6
out = Path(sys.argv[1])
store = SessionStore.open(out)
model = ModelIdentity("SmolLM2-135M-Instruct", "/models/SmolLM2-135M-Instruct.Q4_1.gguf", "ab" * 32, "Q4_1")
tree = MessageTree()
q = tree.add(Message("user", "What is a KV cache?"), None)
tree.add(Message("assistant", "Keys and values kept.", thinking="\nThey ask about caches.\n"), q.id)
other = tree.add(Message("assistant", "The keys and values of past tokens."), q.id)
msgs = [Message("system", "You are a concise assistant."), *tree.messages()]
record = {"reply": other.content, "prompt_tokens": 30, "prefill_tokens": 30, "prefill_ms": 40.0}
store.save(Snapshot("work", model, msgs, 1, 50, leaf=other.id),
           TurnRow(3, "CPU", 30, 40.0, record, message_id=other.id))
store.set_draft("work", "and how big is it")
store.keep_scores("work", other.id, '[{"id": 1}]')
