"""Presets from other tools' files, as chatapp's own (chatapp.presets): LM Studio's preset files
(`*.preset.json`: `operation` and `load` field lists, or the older `inference_params`) and
llama-server's `--models-preset` INI files (a section per model, `[*]` for every one).

Each becomes a table of chatapp settings, checked as any preset is (presets.parse_preset); what
chatapp has no setting for is named, never dropped silently."""

from __future__ import annotations

import configparser
import json
import re
from dataclasses import dataclass
from pathlib import Path

from chatapp import paths
from chatapp.errors import ConfigError
from chatapp.presets import MODEL_KEY, parse_preset

MAX_IMPORT_BYTES = paths.MiB


@dataclass(frozen=True)
class Imported:
    name: str
    table: dict
    """The preset's keys as chatapp writes them (settings, and `model` when the file names one)."""
    skipped: tuple[str, ...]
    """The file's keys chatapp has no setting for."""


# LM Studio: its key -> (chatapp's setting, the value when the field is unchecked, i.e. off).
# An unchecked sampler is off (min-p 0, top-p 1, top-k 0); an unchecked limit is none (left out).
LM_STUDIO = {
    "llm.prediction.systemPrompt": ("system_prompt", None),
    "llm.prediction.temperature": ("temperature", None),
    "llm.prediction.topKSampling": ("top_k", 0),
    "llm.prediction.topPSampling": ("top_p", 1.0),
    "llm.prediction.minPSampling": ("min_p", 0.0),
    "llm.prediction.maxPredictedTokens": ("max_tokens", None),
    "llm.prediction.maxTokens": ("max_tokens", None),
    "llm.prediction.seed": ("seed", -1),
    "llm.load.contextLength": ("n_ctx", None),
    "llm.load.llama.kCacheQuantizationType": ("kv_type", "f16"),
    "llm.load.llama.flashAttention": ("flash_attn", None),
    "llm.load.flashAttention": ("flash_attn", None),
}
LM_STUDIO_LEGACY = {"pre_prompt": "system_prompt", "temp": "temperature", "top_k": "top_k", "top_p": "top_p",
                    "min_p": "min_p", "n_predict": "max_tokens", "seed": "seed", "n_ctx": "n_ctx"}

# llama-server's INI keys (its long options without the dashes, or their LLAMA_ARG_ variables).
LLAMA_SERVER = {
    "temp": "temperature", "temperature": "temperature", "top-k": "top_k", "top-p": "top_p", "min-p": "min_p",
    "seed": "seed", "n-predict": "max_tokens", "predict": "max_tokens", "ctx-size": "n_ctx",
    "cache-type-k": "kv_type", "flash-attn": "flash_attn", "threads": "threads", "n-gpu-layers": "gpu_layers",
    "gpu-layers": "gpu_layers", "reasoning-budget": "think_budget", "system-prompt": "system_prompt",
}
LLAMA_SERVER_UNSET = {"n_ctx": 0, "max_tokens": -1, "seed": -1}
"""llama-server's "the model's own" or "none" values, left out rather than set."""


def preset_name(text: str) -> str:
    """A preset's name from another tool's ("My Preset (v2)" -> "my-preset-v2")."""
    name = re.sub(r"[^a-z0-9._-]+", "-", text.strip().lower()).strip("-._")[:64]
    return name or "imported"


def import_file(path: Path, name: str | None = None) -> list[Imported]:
    """The presets a file holds; ConfigError in one line when it is neither kind, or one is bad."""
    try:
        text = paths.read_capped(path, MAX_IMPORT_BYTES).decode("utf-8-sig")
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"cannot read {path}: it is not UTF-8 text") from None
    if text.lstrip().startswith("{"):
        found = [_lm_studio(path, text, name)]
    else:
        found = _llama_server(path, text, name)
    for preset in found:
        parse_preset(preset.name, preset.table, f"{path} ({preset.name})")  # every value checked as chatapp's own
    return found


def _unwrap(value: object, off: object) -> tuple[bool, object]:
    """LM Studio's {"checked": bool, "value": v}: (whether to set it, the value)."""
    if isinstance(value, dict) and "checked" in value:
        if value.get("checked"):
            return True, value.get("value")
        return off is not None, off
    return True, value


def _lm_studio(path: Path, text: str, name: str | None) -> Imported:
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise ConfigError(f"{path}: not an LM Studio preset (JSON): {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: not an LM Studio preset: the JSON is not an object")
    table: dict = {}
    skipped: list[str] = []
    fields = [f for part in ("operation", "load") if isinstance(data.get(part), dict)
              for f in data[part].get("fields", []) if isinstance(f, dict)]
    for field in fields:
        key = field.get("key")
        if key not in LM_STUDIO:
            skipped.append(str(key))
            continue
        setting, off = LM_STUDIO[key]
        wanted, value = _unwrap(field.get("value"), off)
        if wanted:
            table[setting] = _lm_value(setting, value)
    legacy = data.get("inference_params", {})
    for key, value in (legacy.items() if isinstance(legacy, dict) else ()):
        if key in LM_STUDIO_LEGACY:
            table.setdefault(LM_STUDIO_LEGACY[key], value)
        else:
            skipped.append(key)
    load = data.get("load_params", {})
    if isinstance(load, dict) and "n_ctx" in load:
        table.setdefault("n_ctx", load["n_ctx"])
    if not table:
        raise ConfigError(f"{path}: not an LM Studio preset chatapp can read: none of its fields is a setting "
                          "chatapp has (system prompt, samplers, context length, KV type)")
    own = name or (data["name"] if isinstance(data.get("name"), str) else path.name.removesuffix(".json")
                   .removesuffix(".preset"))
    return Imported(preset_name(own), table, tuple(skipped))


def _lm_value(setting: str, value: object) -> object:
    if setting == "flash_attn" and isinstance(value, bool):
        return "on" if value else "off"
    if setting in ("temperature", "top_p", "min_p") and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    return value


def _llama_server(path: Path, text: str, name: str | None) -> list[Imported]:
    parser = configparser.ConfigParser(interpolation=None, default_section="*")
    try:
        parser.read_string(text, source=str(path))
    except configparser.Error as exc:
        raise ConfigError(f"{path}: neither an LM Studio preset (JSON) nor a llama-server preset INI: "
                          f"{str(exc).splitlines()[0]}") from None
    sections = parser.sections()
    if not sections:
        raise ConfigError(f"{path}: a llama-server preset INI names its presets in [sections]; this has none")
    if name is not None and len(sections) > 1:
        raise ConfigError(f"{path} holds {len(sections)} presets ({', '.join(sections)}); --name names one")
    return [_ini_section(path, section, dict(parser[section]), name) for section in sections]


def _ini_section(path: Path, section: str, raw: dict[str, str], name: str | None) -> Imported:
    table: dict = {}
    skipped: list[str] = []
    for key, value in raw.items():
        key = key.strip().lower()
        if key.startswith("llama_arg_"):
            key = key.removeprefix("llama_arg_").replace("_", "-")
        value = value.strip()
        if key in ("model", "m"):
            table[MODEL_KEY] = Path(value).name
        elif key in ("hf", "hf-repo"):
            table[MODEL_KEY] = f"hf:{value}"
        elif key in LLAMA_SERVER:
            setting = LLAMA_SERVER[key]
            parsed = _ini_value(path, section, key, setting, value)
            if LLAMA_SERVER_UNSET.get(setting) != parsed:
                table[setting] = parsed
        else:
            skipped.append(key)
    return Imported(preset_name(name or section), table, tuple(skipped))


def _ini_value(path: Path, section: str, key: str, setting: str, value: str) -> object:
    if setting in ("system_prompt", "kv_type"):
        return value
    if setting == "flash_attn":
        return {"1": "on", "true": "on", "0": "off", "false": "off"}.get(value.lower(), value.lower())
    try:
        return float(value) if setting in ("temperature", "top_p", "min_p") else int(value)
    except ValueError:
        raise ConfigError(f"{path} [{section}]: {key} must be a number, got {value!r}") from None


def write_presets(found: list[Imported], source: Path, *, replace: bool = False,
                  folder: Path | None = None) -> list[Path]:
    """Write each preset as NAME.toml in the presets folder (tomlkit, a comment saying where it came
    from). An existing file is kept unless `replace`: then nothing is written."""
    from chatapp.presets import presets_dir

    folder = folder or presets_dir()
    for preset in found:
        target = folder / f"{preset.name}.toml"
        if target.exists() and not replace:
            raise ConfigError(f"preset {preset.name!r} exists ({target}); give --replace to overwrite it, "
                              "or --name")
    return [_write(preset, source, folder / f"{preset.name}.toml") for preset in found]


def _write(preset: Imported, source: Path, target: Path) -> Path:
    import tomlkit

    from chatapp.private import atomic_write, make_private_dir

    folder = target.parent
    document = tomlkit.document()
    document.add(tomlkit.comment(f"imported from {source}"))
    if preset.skipped:
        document.add(tomlkit.comment(f"not imported (chatapp has no such setting): {', '.join(preset.skipped)}"))
    for key, value in preset.table.items():
        document[key] = value
    try:
        make_private_dir(folder)
        atomic_write(target, [tomlkit.dumps(document).encode("utf-8")])
    except OSError as exc:
        raise ConfigError(f"cannot write {target}: {exc.strerror or exc}") from None
    return target
