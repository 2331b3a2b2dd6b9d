"""load_settings: defaults, types and one-line errors for a bad config file."""

from __future__ import annotations

import tomllib

import pytest

from chatapp.config import (DEFAULT_DRAFT, DRAFT_MODES, Settings, load_settings, save_setting, to_toml, toml_value,
                            with_environment)
from chatapp.errors import ConfigError


def write(tmp_path, text: str):
    path = tmp_path / "config.toml"
    path.write_text(text, encoding="utf-8")
    return path


def test_a_missing_file_gives_the_defaults(tmp_path):
    assert load_settings(tmp_path / "absent.toml") == Settings()


def test_the_default_path_comes_from_xdg(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    (tmp_path / "chatapp").mkdir()
    (tmp_path / "chatapp" / "config.toml").write_text("n_ctx = 1024\n")
    assert load_settings().n_ctx == 1024


def test_values_from_the_file_override_defaults(tmp_path):
    settings = load_settings(write(tmp_path, 'n_ctx = 8192\nkv_type = "q8_0"\ntheme = "chatapp-light"\n'))
    assert settings == Settings(n_ctx=8192, kv_type="q8_0", theme="chatapp-light")


def test_drafting_is_one_closed_set_with_one_default(tmp_path):
    assert DRAFT_MODES == ("ngram", "off") and DEFAULT_DRAFT in DRAFT_MODES
    assert Settings().draft == DEFAULT_DRAFT and Settings().draft_max == 48
    settings = load_settings(write(tmp_path, 'draft = "ngram"\ndraft_max = 32\n'))
    assert (settings.draft, settings.draft_max) == ("ngram", 32)
    assert Settings().replace(draft="off", draft_max=1).draft_max == 1
    with pytest.raises(ConfigError, match="draft must be one of ngram, off"):
        Settings().replace(draft="NGRAM")


def test_an_integer_is_accepted_where_a_float_is_expected(tmp_path):
    settings = load_settings(write(tmp_path, "temperature = 1\n"))
    assert settings.temperature == 1.0 and isinstance(settings.temperature, float)


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ('n_ctx = "big"\n', "n_ctx must be int"),
        ("n_ctx = 1.5\n", "n_ctx must be int"),
        ("n_ctx = true\n", "n_ctx must be int"),
        ("temperature = true\n", "temperature must be float"),
        ("model = 3\n", "model must be str"),
        ("colour = 1\n", "unknown setting 'colour'"),
        ('kv_type = "q5_1"\n', "kv_type must be one of f16, q8_0, q4_0"),
        ("n_ctx = 8\n", "n_ctx must be at least 16"),
        ('draft = "medusa"\n', "draft must be one of ngram, off, got 'medusa'"),
        ("draft = true\n", "draft must be str"),
        ("draft_max = 0\n", "draft_max must be 1 to 64, got 0"),
        ("draft_max = 65\n", "draft_max must be 1 to 64, got 65"),
        ('draft_max = "8"\n', "draft_max must be int"),
        ("threads = -2\n", "threads must be 0"),
        ("temperature = -0.1\n", "temperature must be 0 or more"),
        ('n_ctx = "unterminated\n', "cannot read"),
    ],
)
def test_a_bad_file_raises_one_config_line(tmp_path, text, fragment):
    with pytest.raises(ConfigError) as caught:
        load_settings(write(tmp_path, text))
    assert fragment in caught.value.message
    assert "\n" not in caught.value.one_line()
    assert caught.value.one_line().startswith("Config: ")


def test_to_toml_round_trips_awkward_strings():
    settings = Settings(system_prompt='Say "hi"\\\n\tthen \x7f\x01 stop. é')
    assert Settings(**tomllib.loads(to_toml(settings))) == settings


def test_to_toml_of_the_defaults_loads_back(tmp_path):
    assert load_settings(write(tmp_path, to_toml(Settings()))) == Settings()


def test_save_setting_writes_a_new_file(tmp_path):
    path = tmp_path / "config" / "config.toml"
    assert save_setting("theme", "chatapp-light", path) == path
    assert load_settings(path).theme == "chatapp-light"


def test_save_setting_changes_one_key_and_keeps_the_rest_of_the_file(tmp_path):
    path = tmp_path / "config.toml"
    original = ('# my settings\nn_ctx = 2048  # enough for me\ntheme = "chatapp-dark"\n'
                'system_prompt = """Be brief.\ntheme = "not a key here"\n"""\n')
    path.write_text(original, encoding="utf-8")
    save_setting("theme", "chatapp-phosphor", path)
    assert path.read_text(encoding="utf-8") == original.replace('theme = "chatapp-dark"', 'theme = "chatapp-phosphor"')
    settings = load_settings(path)
    assert (settings.theme, settings.n_ctx, settings.system_prompt) == \
        ("chatapp-phosphor", 2048, 'Be brief.\ntheme = "not a key here"\n')
    save_setting("max_tokens", 64, path)
    assert path.read_text(encoding="utf-8").endswith("\nmax_tokens = 64\n")
    assert load_settings(path).max_tokens == 64


@pytest.mark.parametrize("text", ['theme = "unclosed\n', 'theme = "a"\ntheme = "b"\n'])
def test_save_setting_leaves_a_file_it_cannot_edit_safely_alone(tmp_path, text):
    path = tmp_path / "config.toml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError):
        save_setting("theme", "chatapp-light", path)
    assert path.read_text(encoding="utf-8") == text


def test_save_setting_edits_the_document_not_lines_that_look_like_keys(tmp_path):
    """A `theme = ...` line inside a multi-line string is text, not the setting (a line-based
    edit broke the string); the edit goes to the document's own key."""
    path = tmp_path / "config.toml"
    path.write_text('system_prompt = """\ntheme = "x"\n"""\n', encoding="utf-8")
    save_setting("theme", "chatapp-light", path)
    settings = load_settings(path)
    assert settings.theme == "chatapp-light" and settings.system_prompt == 'theme = "x"\n'


def test_save_setting_refuses_unknown_keys_and_bad_values(tmp_path):
    path = tmp_path / "config.toml"
    with pytest.raises(ConfigError):
        save_setting("colour", "red", path)
    with pytest.raises(ConfigError):
        save_setting("kv_type", "q5_9", path)
    assert not path.exists()


KEY = "sk-0123456789abcdef"


@pytest.mark.parametrize(("key", "fragment"), [
    (KEY + "\n", "has a control character in it"),
    (KEY[:4] + "\x00" + KEY[4:], "has a control character in it"),
    ("\t" + KEY, "has a control character in it"),
    (" " + KEY, "starts or ends with a space"),
    (KEY + "\u00a0", "starts or ends with a space"),
])
def test_an_api_key_that_cannot_be_a_header_is_refused_without_showing_it(tmp_path, key, fragment):
    """Such a key would otherwise reach the HTTP layer and come back as "lost the connection"."""
    with pytest.raises(ConfigError) as caught:
        Settings().replace(api_key=key)
    assert caught.value.one_line().startswith(f"Config: api_key {fragment}")
    assert KEY not in caught.value.one_line() and KEY[4:] not in caught.value.one_line()
    with pytest.raises(ConfigError, match=fragment):
        with_environment(Settings(), {"CHATAPP_API_KEY": key})
    with pytest.raises(ConfigError, match=fragment):
        load_settings(write(tmp_path, f"api_key = {toml_value(key)}\n"))


def test_a_key_with_a_space_inside_is_a_key(tmp_path):
    assert Settings().replace(api_key="two words").api_key == "two words"


@pytest.mark.parametrize("text", ["stream_timeout = 0\n", "stream_timeout = -5\n", "stream_timeout = inf\n",
                                  "stream_timeout = nan\n", "stream_timeout = 1e9\n", 'stream_timeout = "soon"\n'])
def test_the_stream_timeout_is_a_sane_number_of_seconds(tmp_path, text):
    with pytest.raises(ConfigError, match="stream_timeout must be"):
        load_settings(write(tmp_path, text))


def test_the_stream_timeout_is_read_and_reaches_each_turn(tmp_path):
    from chatapp.engine.backend import GenerationSettings

    settings = load_settings(write(tmp_path, "stream_timeout = 30\n"))
    assert settings.stream_timeout == 30.0 and Settings().stream_timeout == 120.0
    assert GenerationSettings.from_settings(settings).stream_timeout == 30.0


def test_prefill_while_typing_is_on_by_default_and_can_be_turned_off(tmp_path):
    assert Settings().prefill_while_typing is True
    assert load_settings(write(tmp_path, "prefill_while_typing = false\n")).prefill_while_typing is False
    with pytest.raises(ConfigError, match="prefill_while_typing"):
        load_settings(write(tmp_path, 'prefill_while_typing = "no"\n'))


def test_flash_attn_is_auto_by_default_and_an_old_true_or_false_reads_as_on_or_off(tmp_path):
    assert Settings().flash_attn == "auto"
    assert load_settings(write(tmp_path, "flash_attn = true\n")).flash_attn == "on"
    assert load_settings(write(tmp_path, "flash_attn = false\n")).flash_attn == "off"
    assert load_settings(write(tmp_path, 'flash_attn = "off"\n')).flash_attn == "off"
    with pytest.raises(ConfigError, match="flash_attn must be one of auto, on, off"):
        load_settings(write(tmp_path, 'flash_attn = "fast"\n'))
