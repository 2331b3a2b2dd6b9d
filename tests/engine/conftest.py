import pytest

from chatapp.config import Settings
from chatapp.engine.chat import Chat, GenerationSettings
from chatapp.engine.llama import LlamaRuntime, LoadOptions

GREEDY = GenerationSettings(temperature=0.0, max_tokens=24)


@pytest.fixture
def runtime(default_model_path):
    rt = LlamaRuntime(default_model_path, LoadOptions(n_ctx=1024))
    yield rt
    rt.close()


@pytest.fixture
def greedy_chat(runtime):
    return Chat(runtime, "You are a concise assistant.", GREEDY)


def run_turn(chat, text):
    """Drain one turn; return (events, record)."""
    events = list(chat.send(text))
    return events, events[-1].record


@pytest.fixture
def settings():
    return Settings(n_ctx=1024, temperature=0.0, max_tokens=24)
