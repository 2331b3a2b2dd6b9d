"""The model's own tokenizer, round-tripped through display pieces."""

import pytest

from chatapp.engine.events import Message
from chatapp.engine.tokens import describe, joined, tokenize_text

from .conftest import make_engine
from tests.engine.token_samples import SAMPLES


@pytest.mark.parametrize("text", SAMPLES)
def test_pieces_join_back_to_the_exact_input(runtime, text):
    tokens = tokenize_text(runtime, text)
    assert joined(tokens) == text
    assert all("\ufffd" not in t.piece for t in tokens)
    assert not any(t.special for t in tokens)


def test_split_characters_show_up_once_in_the_token_that_completes_them(runtime):
    tokens = tokenize_text(runtime, "🦙")
    # The llama emoji is four bytes; this tokenizer needs more than one token for it.
    assert len(tokens) > 1
    assert [t.piece for t in tokens if t.piece] == ["🦙"]
    assert b"".join(t.raw for t in tokens) == "🦙".encode()


def test_templated_conversation_marks_special_tokens(runtime):
    engine = make_engine(runtime, "Be brief.")
    messages = engine.messages + [Message("user", "Hi 🦙")]
    text = engine.render(messages)
    tokens = describe(runtime, engine.prompt_ids(messages))
    assert joined(tokens) == text
    specials = [t.piece for t in tokens if t.special]
    assert "<|im_start|>" in specials and "<|im_end|>" in specials
    assert "<|im_start|>" not in [t.piece for t in tokens if not t.special]


def test_ids_match_the_tokenizer(runtime):
    tokens = tokenize_text(runtime, "Hello world")
    assert [t.id for t in tokens] == runtime.tokenize("Hello world", special=False)
