"""Property: whatever a user types as options or writes in the config file, chatapp answers with
an exit status of 0, 1 or 2 and at most one error line, never a traceback.

The runs stop before a model loads (the model is a path that doesn't exist, which is checked
last), so many examples stay fast; the values reach the same validation a real run uses.
Besides the error, stderr may hold one `chatapp: note:` line saying what runs differently
(threads capped, n_ctx rounded up).
"""

from __future__ import annotations

from dataclasses import fields

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import chatapp.commands.core  # noqa: F401 - registers ask on the app the in-process runner uses
from chatapp import paths
from chatapp.config import Settings, toml_value

NO_MODEL = "/nonexistent/model.gguf"
SETTING_NAMES = [f.name for f in fields(Settings)]

numbers_as_text = st.one_of(
    st.integers(min_value=-2**70, max_value=2**70).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.sampled_from(["nan", "inf", "-inf", "1e9", "1e400", "-0", "0x10", "", " ", "abc", "٣"]),
)
free_text = st.one_of(st.text(max_size=20), st.sampled_from(["caf\udcff", "\udcc0\udc80", "", "-", "--"]))
OPTIONS = {
    "--ctx": numbers_as_text, "--temperature": numbers_as_text, "--max-tokens": numbers_as_text,
    "--seed": numbers_as_text, "--threads": numbers_as_text, "--gpu-layers": numbers_as_text,
    "--kv-type": st.one_of(st.sampled_from(["f16", "q8_0", "q4_0", "q5", ""]), free_text),
    "--system": free_text, "--session": free_text,
    "--draft": st.one_of(st.sampled_from(["ngram", "off", "NGRAM", ""]), free_text),
    "--draft-max": numbers_as_text,
    "--attach": free_text,
    # Nothing here may reach past this machine: refused at once, or not a URL at all.
    "--server": st.sampled_from(["", "not a url", "ftp://127.0.0.1:1", "http://", "http://127.0.0.1:1",
                                 "http://[::1]:1/x", "127.0.0.1:1"]),
    "--api-key": st.one_of(st.just(""), st.text(alphabet="QZXJ", min_size=4, max_size=12).map("sk-".__add__)),
    "--allow-long-ctx": st.none(),  # a flag: present or not
}
config_values = st.one_of(
    st.integers(min_value=-2**70, max_value=2**70), st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(), st.text(max_size=12), st.sampled_from(["f16", "q8_0", "chatapp-dark", "textual-dark"]),
)
config_tables = st.dictionaries(st.one_of(st.sampled_from(SETTING_NAMES), st.sampled_from(["colour", "x"])),
                                config_values, max_size=5)


def check(result) -> None:
    assert result.exit_code in (0, 1, 2), (result.exit_code, result.stderr)
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    errors = [line for line in lines if not line.startswith("chatapp: note: ")]
    assert len(errors) <= 1 and len(lines) - len(errors) <= 1, result.stderr
    if result.exit_code:
        assert errors and errors[0].startswith("chatapp: "), result.stderr


def write_config(table: dict) -> None:
    path = paths.config_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"{key} = {toml_value(value)}\n" for key, value in table.items()), encoding="utf-8")


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(options=st.dictionaries(st.sampled_from(sorted(OPTIONS)), st.none(), max_size=4).flatmap(
    lambda chosen: st.fixed_dictionaries({name: OPTIONS[name] for name in chosen})),
    prompt=free_text, config=config_tables)
def test_ask_options_and_config_values_never_reach_a_traceback(invoke, options, prompt, config):
    write_config(config)
    args = [arg for name, value in options.items() for arg in ((name,) if value is None else (name, value))]
    result = invoke("ask", *args, "--model", NO_MODEL, "--", prompt)
    check(result)
    if options.get("--api-key"):  # the key is never echoed, whatever went wrong
        assert options["--api-key"] not in result.stderr + result.stdout


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(config=config_tables, name=free_text)
def test_read_only_commands_with_any_config_never_reach_a_traceback(invoke, config, name):
    write_config(config)
    for args in (("config", "show"), ("sessions", "list"), ("sessions", "show", name),
                 ("sessions", "export", name, "--format", "json")):
        check(invoke(*args))
