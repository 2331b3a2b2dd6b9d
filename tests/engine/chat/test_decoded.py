"""Replies put back into the next prompt as their turns decoded them (chatapp.engine.chat.decoded),
on the real default model: the text is the same byte for byte, only its cut into tokens is the
cache's, so a tool loop's next step prefills only the result and the glue."""

from __future__ import annotations

from chatapp.engine.chat import prompt_tokens
from chatapp.engine.chat.decoded import DecodedReplies
from chatapp.engine.events import Message, TurnDone
from chatapp.engine.local.backend import LocalBackend
from chatapp.engine.tools.builtin import CURRENT_TIME, LIST_FOLDER, READ_FILE
from chatapp.engine.tools.grammar import call_grammar
from chatapp.engine.tools.spec import ToolSpec
from tests.engine.conftest import make_engine

CALL = '{ "tool_call": {"name": "add", "arguments": { "a": 17, "b": 25 } } }'
ADD = ToolSpec("add", "Add two integers.", {"type": "object", "properties": {"a": {"type": "integer"},
                                                                          "b": {"type": "integer"}},
                                            "required": ["a", "b"]}, "test")


def odd_cut(backend: LocalBackend, text: str) -> list[int]:
    """`text` in tokens as a model under a grammar wrote it: `{`, ` `, `"` apart, the rest as usual."""
    return [t.id for piece in ("{", " ", '"') for t in backend.tokenize(piece)] + \
        [t.id for t in backend.tokenize(text[3:])]


def test_a_reply_cut_unlike_its_text_goes_back_in_its_own_tokens_and_nothing_else_changes(runtime):
    backend = LocalBackend(runtime)
    decoded = DecodedReplies(backend)
    ids = odd_cut(backend, CALL)
    assert ids != [t.id for t in backend.tokenize(CALL)]
    messages = [Message("system", "You are a helpful assistant.", id="s"), Message("user", "Add 17 and 25.", id="q"),
                Message("assistant", CALL, id="r"), Message("tool", "42", id="t")]
    plain = prompt_tokens.prompt_ids(backend, backend.render, messages)
    decoded.remember("r", CALL, ids)
    decoded.remember("q", "not what it says", ids)  # ids that do not spell the text: not kept
    broken = [t.id for t in backend.tokenize("Mango (\ufffd)")]  # U+FFFD: what undecodable bytes became
    assert decoded.remember("u", "Mango (\ufffd)", broken) == [] and decoded.splice([1, 2], [Message(
        "assistant", "Mango (\ufffd)", id="u")]) == [1, 2]
    spliced = decoded.splice(plain, messages)
    assert spliced != plain and len(spliced) == len(plain) + 1
    assert b"".join(t.raw for t in backend.describe(spliced)) == b"".join(t.raw for t in backend.describe(plain))
    start = next(i for i in range(len(spliced)) if spliced[i:i + len(ids)] == ids)
    assert spliced[:start] == plain[:start]  # in the reply's place, the rest as it was
    assert spliced[start + len(ids):] == plain[start + len(ids) - 1:]
    decoded.forget()
    assert decoded.splice(plain, messages) == plain


def test_a_tool_steps_call_is_not_prefilled_again(runtime):
    """With every token of the call reused, the step after a result prefills the result and the
    template's glue only, however the grammar made the model cut the call."""
    engine = make_engine(runtime, "You are a helpful assistant.")
    engine.set_tools([CURRENT_TIME, READ_FILE, LIST_FOLDER, ADD])
    engine.set_generation(grammar=call_grammar([ADD], engine.tool_syntax))
    first = next(e.record for e in list(engine.send("What is 17 plus 25, and what time is it?"))
                 if isinstance(e, TurnDone))
    engine.set_generation(grammar=None)
    second = next(e.record for e in list(engine.send_tool_results(["42"])) if isinstance(e, TurnDone))
    assert second.cached_tokens == first.kv_used
    assert second.prefill_tokens == second.prompt_tokens - first.kv_used < 20


def test_a_resumed_session_puts_the_call_back_as_its_saved_state_holds_it(runtime, tmp_path):
    """A new process reads the call's tokens from the turn's record ("reply_ids_as_decoded"), so
    the saved state holds the whole call and the step after it still prefills only the result."""
    from chatapp.engine.sessions.manager import SessionManager

    tools = [CURRENT_TIME, READ_FILE, LIST_FOLDER, ADD]
    engine = make_engine(runtime, "You are a helpful assistant.")
    engine.set_tools(tools)
    manager = SessionManager.open(engine.settings, tmp_path)
    live = manager.resume("calls", engine)
    engine.set_generation(grammar=call_grammar([ADD], engine.tool_syntax))
    first = next(e.record for e in list(engine.send("What is 17 plus 25, and what time is it?"))
                 if isinstance(e, TurnDone))
    live.save_turn(live.annotate(first))
    cut = first.extra.get("reply_ids_as_decoded")  # absent where the grammar left the usual cut

    again = make_engine(runtime, "You are a helpful assistant.")  # a new process: only the files
    again.set_tools(tools)
    report = manager.resume("calls", again).report
    assert report.restored_tokens == first.kv_used
    second = next(e.record for e in list(again.send_tool_results(["42"])) if isinstance(e, TurnDone))
    assert second.cached_tokens == first.kv_used and second.prefill_tokens < 20
    if cut:  # the call in the prompt, token for token as decoded
        ids = again.prompt_ids(again.messages[:3], add_generation_prompt=False)
        assert any(ids[i:i + len(cut)] == cut for i in range(len(ids)))
