"""Writes sessions.db with chatapp's schema 8 into the folder given, as tests/data/sessions/schema8.db
was made: run with a checkout of the commit before images (81ca20e) first on PYTHONPATH.
One session: a question, a reply with a thought, and a second question on a branch beside it."""
import sys
from pathlib import Path
from chatapp.engine.chat.tree import MessageTree
from chatapp.engine.events import Message
from chatapp.engine.sessions.store import ModelIdentity, SessionStore, Snapshot, TurnRow
from chatapp.engine.sessions.schema import SCHEMA_VERSION
assert SCHEMA_VERSION == 8
out = Path(sys.argv[1])
store = SessionStore.open(out)
model = ModelIdentity("SmolLM2-135M-Instruct", "/models/SmolLM2-135M-Instruct.Q4_1.gguf", "ab" * 32, "Q4_1")
tree = MessageTree()
q = tree.add(Message("user", "What colour is the lighthouse?"), None)
reply = tree.add(Message("assistant", "Red and white.", thinking="\nStripes, like a barber's pole.\n"), q.id)
tree.add(Message("user", "Describe the lighthouse."), None)
msgs = [Message("system", "You are a concise assistant."), *tree.messages()]
record = {"reply": reply.content, "prompt_tokens": 20, "prefill_tokens": 20, "prefill_ms": 30.0}
store.save(Snapshot("lighthouse", model, msgs, 1, 30, leaf=reply.id), TurnRow(2, "CPU", 20, 30.0, record,
                                                                                message_id=reply.id))
