"""Typed settings read from a TOML file at a platformdirs path.

There is no module-level instance: callers load settings when they need them.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import tomllib
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Literal, get_args

from chatapp import paths
from chatapp.errors import ConfigError

KVType = Literal["f16", "q8_0", "q4_0"]
"""The KV-cache types chatapp offers: the one list the CLI, the config and the engine share."""
KV_TYPES: tuple[str, ...] = get_args(KVType)


@dataclass(frozen=True)
class Settings:
    model: str = "smollm2-135m-instruct"
    """A catalog name or a path to a GGUF file."""
    n_ctx: int = 4096
    """Context window in tokens: the KV cache's capacity."""
    threads: int = 0
    """CPU threads; 0 means the number of physical cores."""
    gpu_layers: int = -1
    """Layers to offload to the GPU; -1 means all, when the build supports it."""
    kv_type: KVType = "f16"
    """KV-cache type: f16, q8_0 or q4_0 (the quantized ones turn on flash attention)."""
    temperature: float = 0.7
    top_p: float = 0.95
    top_k: int = 40
    min_p: float = 0.05
    max_tokens: int = 512
    seed: int = -1
    """-1 picks a random seed per run."""
    system_prompt: str = "You are a helpful assistant."
    theme: str = "chatapp-dark"
    state_cap_mb: int = 2048
    """Cap on the total size of saved KV-cache states; least recently used go first."""
    server: str = ""
    """A llama-server URL (e.g. http://127.0.0.1:8080) to chat through instead of loading a model."""
    api_key: str = ""
    """The key of a llama-server started with --api-key."""

    def replace(self, **changes) -> "Settings":
        clean = {k: v for k, v in changes.items() if v is not None}
        return validate(dataclasses.replace(self, **clean))


def validate(settings: Settings) -> Settings:
    if settings.n_ctx < 16:
        raise ConfigError(f"n_ctx must be at least 16, got {settings.n_ctx}")
    if settings.kv_type not in KV_TYPES:
        raise ConfigError(f"kv_type must be one of {', '.join(KV_TYPES)}, got {settings.kv_type!r}")
    if settings.threads < 0:
        raise ConfigError(f"threads must be 0 (auto) or more, got {settings.threads}")
    if settings.max_tokens < 1:
        raise ConfigError(f"max_tokens must be at least 1, got {settings.max_tokens}")
    if settings.temperature < 0:
        raise ConfigError(f"temperature must be 0 or more, got {settings.temperature}")
    return settings


def read_table(path: Path) -> dict | None:
    """The config file's raw TOML table, or None when there is no file."""
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"cannot read {path}: {exc}") from None


ENVIRONMENT = {"server": "CHATAPP_SERVER", "api_key": "CHATAPP_API_KEY"}
"""Settings the environment may give; they beat the config file."""


def load_settings(path: Path | None = None) -> Settings:
    """Read the config file, then the environment (ENVIRONMENT); a missing file gives the defaults."""
    path = path or paths.config_file()
    table = read_table(path)
    settings = Settings() if table is None else from_table(table, path)
    found = {key: os.environ[var] for key, var in ENVIRONMENT.items() if os.environ.get(var)}
    return dataclasses.replace(settings, **found) if found else settings


def from_table(raw: dict, path: Path) -> Settings:
    known = {f.name: f for f in fields(Settings)}
    values = {}
    for key, value in raw.items():
        if key not in known:
            raise ConfigError(f"{path}: unknown setting {key!r}")
        expected = type(getattr(Settings(), key))
        if expected is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if not isinstance(value, expected) or isinstance(value, bool) != (expected is bool):
            raise ConfigError(f"{path}: {key} must be {expected.__name__}, got {value!r}")
        values[key] = value
    return validate(Settings(**values))


def toml_value(value: str | float | bool) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        # JSON string escapes are TOML basic-string escapes, except that TOML
        # also forbids a raw DEL.
        return json.dumps(value, ensure_ascii=False).replace("\x7f", "\\u007f")
    return repr(value)


def save_setting(key: str, value: str | float | bool, path: Path | None = None) -> Path:
    """Set one key in the config file and leave the rest of it, comments included, as it was.

    The edited text must read back as the old table with just that key changed, or nothing
    is written: a file the edit can't safely touch stays the user's to fix.
    """
    from chatapp.engine.sessions.files import atomic_write  # noqa: PLC0415 - it imports chatapp.config

    path = path or paths.config_file()
    if key not in {f.name for f in fields(Settings)}:
        raise ConfigError(f"unknown setting {key!r}")
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        text = ""
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read {path}: {exc}") from None
    line = f"{key} = {toml_value(value)}"
    edited, replaced = re.subn(rf"^[ \t]*{re.escape(key)}[ \t]*=.*$", lambda _match: line, text, count=1,
                               flags=re.MULTILINE)
    if not replaced:
        edited = text + ("\n" if text and not text.endswith("\n") else "") + line + "\n"
    try:
        table = tomllib.loads(edited)
        ok = table == {**tomllib.loads(text), key: value}
    except tomllib.TOMLDecodeError:
        ok = False
    if not ok:
        raise ConfigError(f"cannot set {key} in {path} without changing other settings; edit it by hand")
    from_table(table, path)  # the new value must be valid too
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(path, [edited.encode("utf-8")])
    except OSError as exc:
        raise ConfigError(f"cannot write {path}: {exc.strerror or exc}") from None
    return path


def to_toml(settings: Settings) -> str:
    lines = [f"{field.name} = {toml_value(getattr(settings, field.name))}" for field in fields(Settings)]
    return "\n".join(lines) + "\n"
