import pytest

from chatapp.config import Settings
from chatapp.engine.backend import GenerationSettings
from chatapp.engine.chat.engine import Engine
from chatapp.engine.local.llama import LlamaRuntime, LoadOptions
from chatapp.engine.local.backend import LocalBackend

GREEDY = GenerationSettings(temperature=0.0, max_tokens=24)


def make_engine(runtime: LlamaRuntime, system_prompt: str = "", generation: GenerationSettings = GREEDY) -> Engine:
    """An engine on the in-process backend over a runtime the test keeps, to check llama.cpp's side."""
    engine = Engine(LocalBackend(runtime), Settings(n_ctx=runtime.n_ctx, system_prompt=system_prompt))
    engine.generation = generation
    return engine


def runtime_of(engine: Engine) -> LlamaRuntime:
    """The runtime under an in-process engine, for tests that check llama.cpp's own state."""
    return engine._backend.runtime  # test-only introspection


@pytest.fixture
def runtime(default_model_path):
    rt = LlamaRuntime(default_model_path, LoadOptions(n_ctx=1024))
    yield rt
    rt.close()


@pytest.fixture
def greedy_chat(runtime):
    return make_engine(runtime, "You are a concise assistant.")


def run_turn(engine, text):
    """Drain one turn; return (events, record)."""
    events = list(engine.send(text))
    return events, events[-1].record


@pytest.fixture
def settings():
    return Settings(n_ctx=1024, temperature=0.0, max_tokens=24)
