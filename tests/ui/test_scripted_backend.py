"""The scripted backend the snapshots run on is a `Backend`: the protocol's members, and each
method's parameters as the protocol names them, so a change to the protocol fails here until
the scripted backend follows it."""

from __future__ import annotations

import inspect

import pytest

from chatapp.engine.backend import Backend, Drafting, ModelSummary

from tests.ui.scripted import ScriptedBackend

METHODS = sorted(name for name, member in vars(Backend).items() if callable(member) and not name.startswith("_"))
ATTRIBUTES = {"summary": ModelSummary, "drafting": Drafting}


def parameters(function) -> list[tuple]:
    """Name, kind (positional or keyword-only) and default of each parameter, self included."""
    return [(p.name, p.kind, p.default) for p in inspect.signature(function).parameters.values()]


def test_the_protocol_is_what_this_test_compares():
    assert {"render", "tokenize_prompt", "stream", "interrupt", "save_cache", "restore_cache",
            "attention", "close"} <= set(METHODS)
    assert set(Backend.__annotations__) == set(ATTRIBUTES)


def test_the_scripted_backend_is_a_backend(default_model_path):
    backend = ScriptedBackend(str(default_model_path))
    assert isinstance(backend, Backend)  # runtime_checkable: every member is there
    for name, kind in ATTRIBUTES.items():
        assert isinstance(getattr(backend, name), kind), name


@pytest.mark.parametrize("name", METHODS)
def test_each_method_takes_the_protocols_parameters(name):
    ours = getattr(ScriptedBackend, name, None)
    assert callable(ours), f"ScriptedBackend has no {name}()"
    assert parameters(ours) == parameters(getattr(Backend, name))
