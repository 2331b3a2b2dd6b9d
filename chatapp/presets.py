"""Named presets: a system prompt, sampler settings, KV type, context size, thinking budget and
draft mode under one name, as LM Studio's presets and llama-server's --models-preset.

A preset is a `[presets.NAME]` table in the config file, or a `NAME.toml` file in the presets
folder beside it (paths.presets_dir()); a file's preset wins over a table of the same name. Its
keys are Settings' own names and every value goes through the config's own checks
(config.from_table), so a preset holds nothing a config file could not. Two keys are its own:
`model = "NAME or SHA256"` makes the preset that model's default, used when no --preset is given,
and `tools = "auto"` (none, required or a tool's name, as --tool-choice takes it) offers the
enabled tools with that choice.

Precedence: the command line's options, then the preset, then the config file's settings.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, fields
from pathlib import Path

from chatapp import paths
from chatapp.config import ENV_SETTINGS, SECRET_SETTINGS, Settings, from_table, read_table
from chatapp.errors import ConfigError

MODEL_KEY = "model"
"""A preset's `model` names the model it is the default of (a name, a file name or a sha256);
it never chooses the model to load."""
NOT_IN_PRESETS = frozenset({*SECRET_SETTINGS, *ENV_SETTINGS, MODEL_KEY})
"""Settings a preset may not hold: the secrets and the server, which belong to the machine, not
to a way of chatting, and `model`, which is the preset's match instead."""
PRESET_KEYS: tuple[str, ...] = tuple(f.name for f in fields(Settings) if f.name not in NOT_IN_PRESETS)
"""The settings a preset may hold: derived from Settings, so a new setting is a preset key too."""
TOOLS_KEY = "tools"
"""A preset's tool choice: offered tools and how, as `ask --tool-choice` takes it (its parser checks it)."""
MAX_TOOLS_CHOICE = 200
SECTION = "presets"
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
_SHA256 = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True)
class Preset:
    name: str
    values: dict
    """The settings it sets, by name: checked, and only those it gives."""
    source: str
    """Where it was read: a file, or the config file and its table."""
    model: str = ""
    """The model it is the default of ("" for none)."""
    tools: str = ""
    """The tool choice it makes ("" for none: the tools stay as they are)."""

    def apply(self, settings: Settings) -> Settings:
        return settings.replace(**self.values)

    def to_json(self) -> dict:
        return {"name": self.name, "source": self.source, "model": self.model or None, "tools": self.tools or None,
                "settings": self.values}


@dataclass(frozen=True)
class Presets:
    presets: dict[str, Preset]
    problems: dict[str, str]
    """A preset that cannot be used, by name: one line naming its file or table and what is wrong."""

    def get(self, name: str) -> Preset:
        """The preset NAME, or ConfigError in one line: its problem, or the names there are."""
        if name in self.problems:
            raise ConfigError(self.problems[name])
        if name not in self.presets:
            known = ", ".join(sorted(self.presets)) or "none yet"
            raise ConfigError(f"no preset {name!r} (presets: {known}; see chatapp presets list)")
        return self.presets[name]

    def for_model(self, names: set[str], sha256: str | None = None) -> Preset | None:
        """The preset that is the default of a model known by these names (its spec, its file's
        name and stem, its catalog name) or this sha256; the first by name when several are."""
        lowered = {n.lower() for n in names if n}
        for name in sorted(self.presets):
            wanted = self.presets[name].model.lower()
            if wanted and (wanted in lowered or (sha256 is not None and wanted == sha256.lower())):
                return self.presets[name]
        return None

    def wants_sha256(self) -> bool:
        """Whether a preset names its model by sha256 (only then is the model's hash worth finding)."""
        return any(_SHA256.fullmatch(p.model.lower()) for p in self.presets.values())


def presets_dir() -> Path:
    return paths.config_dir() / "presets"


def parse_preset(name: str, raw: object, source: str) -> Preset:
    """One preset from its TOML table; ConfigError in one line naming `source` and the key."""
    if not NAME.fullmatch(name):
        raise ConfigError(f"{source}: a preset's name is letters, digits, '.', '_' or '-' (at most 64), "
                          f"got {name!r}")
    if not isinstance(raw, dict):
        raise ConfigError(f"{source}: a preset is a table of settings, got {type(raw).__name__}")
    model = raw.get(MODEL_KEY, "")
    if not isinstance(model, str):
        raise ConfigError(f"{source}: model must be a model's name or sha256, got {model!r}")
    tools = raw.get(TOOLS_KEY, "")
    if not isinstance(tools, str) or len(tools) > MAX_TOOLS_CHOICE or tools != tools.strip() or "\n" in tools:
        raise ConfigError(f"{source}: tools must be auto, none, required or a tool's name, got {tools!r}")
    values = {k: v for k, v in raw.items() if k not in (MODEL_KEY, TOOLS_KEY)}
    for key in values:
        if key in NOT_IN_PRESETS or key in (SECTION, "mcp_servers"):
            raise ConfigError(f"{source}: {key} cannot be set by a preset (keep it in the config file)")
    try:
        checked = from_table(values, source)  # type: ignore[arg-type]  # the config's own checks, one line each
    except ConfigError as exc:  # a type names the source already; a range (validate) does not
        raise ConfigError(exc.message if exc.message.startswith(source) else f"{source}: {exc.message}") from None
    return Preset(name, {k: getattr(checked, k) for k in values}, source, model.strip(), tools)


def load_presets(config_path: Path | None = None, folder: Path | None = None) -> Presets:
    """Every preset, from the config file's `[presets.NAME]` tables and the presets folder's
    `*.toml` files. A bad one is kept as its problem (one line), never raised here: the others
    stay usable and `get` says what is wrong with the one asked for."""
    config_path = config_path or paths.config_file()
    folder = folder or presets_dir()
    found: dict[str, Preset] = {}
    problems: dict[str, str] = {}

    def add(name: str, raw: object, source: str) -> None:
        try:
            found[name] = parse_preset(name, raw, source)
            problems.pop(name, None)
        except ConfigError as exc:
            problems[name] = exc.message
            found.pop(name, None)

    try:
        table = read_table(config_path) or {}
    except ConfigError:
        table = {}  # the config file's own problem is said by every command that reads it
    section = table.get(SECTION, {})
    if isinstance(section, dict):
        for name, raw in section.items():
            add(name, raw, f"{config_path} [presets.{name}]")
    else:
        problems["(config)"] = f"{config_path}: presets must be tables, [presets.NAME]"
    try:
        files = sorted(p for p in folder.iterdir() if p.suffix == ".toml")
    except OSError:
        files = []
    for file in files:
        try:
            raw = tomllib.loads(paths.read_capped(file, paths.MiB).decode("utf-8"))
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError, RecursionError) as exc:
            problems[file.stem] = f"cannot read {file}: {getattr(exc, 'strerror', None) or exc}"
            found.pop(file.stem, None)
            continue
        add(file.stem, raw, str(file))
    return Presets(found, problems)
