"""Writes sessions.db with chatapp's schema 7 into the folder given, as tests/data/sessions/schema7.db
was made: run with a checkout of the commit before the search index (b565b97) first on PYTHONPATH.
Two sessions: a tree whose words lie on both branches (a thought, a tool's result, a question
with an attachment's retrieved block), and one that is deleted after the migration."""
import sys
from pathlib import Path
from chatapp.engine.chat.tree import MessageTree
from chatapp.engine.events import Message
from chatapp.engine.retrieval.context import RetrievedContext, RetrievedEntry
from chatapp.engine.retrieval.document import Attachment
from chatapp.engine.sessions.store import ModelIdentity, SessionStore, Snapshot, TurnRow
from chatapp.engine.sessions.schema import SCHEMA_VERSION
assert SCHEMA_VERSION == 7
out = Path(sys.argv[1])
store = SessionStore.open(out)
model = ModelIdentity("SmolLM2-135M-Instruct", "/models/SmolLM2-135M-Instruct.Q4_1.gguf", "ab" * 32, "Q4_1")
notes = Attachment.from_text("harbour-notes.txt", "The harbour opens at six.\n")
block = RetrievedContext("[harbour-notes.txt]\nThe harbour opens at six.\n\n",
                         (RetrievedEntry("harbour-notes.txt", notes.sha256, "", 1, 1, 8, None),))
tree = MessageTree()
q = tree.add(Message("user", "When does the harbour open?", context=block), None)
tree.add(Message("assistant", "At six, says the lighthouse keeper.", thinking="\nThe notes mention a walrus.\n"), q.id)
other = tree.add(Message("assistant", "It opens at six."), q.id)
call = tree.add(Message("user", "Check the tide table."), other.id)
result = tree.add(Message("tool", "tide: low water at noon, marmalade sky"), call.id)
reply = tree.add(Message("assistant", "Low water is at noon."), result.id)
msgs = [Message("system", "You are a concise assistant."), *tree.messages()]
record = {"reply": reply.content, "prompt_tokens": 30, "prefill_tokens": 30, "prefill_ms": 40.0}
store.save(Snapshot("harbour", model, msgs, 1, 50, attachments=(notes,), leaf=reply.id),
           TurnRow(6, "CPU", 30, 40.0, record, message_id=reply.id))
store.save(Snapshot("doomed", model, [Message("system", "You are a concise assistant."),
                                      Message("user", "Say walrus."), Message("assistant", "Walrus.")], 1, 10))
