"""A model whose chat template is hostile: chatapp answers with one line and exit 2, runs
nothing, and does not hang. The models are copies of the default one, built here with the
`gguf` package's writer and thrown away with tmp_path."""

from __future__ import annotations

import pytest

from tests.gguf_copy import copies_with_templates

TEMPLATES = {
    # reaches Python internals to run a command; outside a sandbox it creates the marker file
    "escape": "{% for c in ''.__class__.__mro__[1].__subclasses__() %}{% if c.__name__ == 'Popen' %}"
              "{{ c(['touch', MARKER]).wait() }}{% endif %}{% endfor %}",
    "endless": "{% for a in range(100000) %}{% for b in range(100000) %}{{ '' }}{% endfor %}{% endfor %}",
    # Jinja would compute this while compiling, inside llama-cpp-python's load
    "fold": "{{ 9 ** (9 ** 9) }}",
}


@pytest.fixture(scope="module")
def hostile(default_model_path, tmp_path_factory):
    folder = tmp_path_factory.mktemp("hostile")
    marker = folder / "escaped"
    models = {name: folder / f"{name}.gguf" for name in TEMPLATES}
    copies_with_templates(default_model_path, {models[name]: source.replace("MARKER", repr(str(marker)))
                                               for name, source in TEMPLATES.items()})
    return models, marker


@pytest.mark.parametrize("name, message", [
    ("escape", "chatapp: Model: the model's chat template tried something unsafe: access to attribute '__class__'"),
    ("endless", "chatapp: Model: the model's chat template did not finish within 1 s of CPU time"),
    ("fold", "chatapp: Model: the model's chat template (tokenizer.chat_template) is refused"),
])
def test_ask_answers_one_line_and_exit_2(chatapp_exe, hostile, name, message):
    models, marker = hostile
    result = chatapp_exe("ask", "--model", str(models[name]), "--max-tokens", "4", "hi")  # times out if it hangs
    assert result.returncode == 2, result
    assert result.stderr.startswith(message), result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert result.stdout == ""  # no reply: nothing was generated
    assert not marker.exists()
