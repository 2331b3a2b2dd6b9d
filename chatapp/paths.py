"""Where chatapp keeps its files. Nothing here touches the disk at import time."""

from __future__ import annotations

from pathlib import Path

import platformdirs

APP_NAME = "chatapp"


def config_dir() -> Path:
    return platformdirs.user_config_path(APP_NAME)


def config_file() -> Path:
    return config_dir() / "config.toml"


def data_dir() -> Path:
    return platformdirs.user_data_path(APP_NAME)


def cache_dir() -> Path:
    return platformdirs.user_cache_path(APP_NAME)


def models_dir() -> Path:
    """Where `chatapp models pull` writes GGUF files."""
    return data_dir() / "models"


def sessions_dir() -> Path:
    return data_dir() / "sessions"


def user_themes_dir() -> Path:
    return config_dir() / "themes"


def checkout_root() -> Path | None:
    """The source checkout this package runs from, if any (an editable install)."""
    root = Path(__file__).resolve().parent.parent
    return root if (root / "pyproject.toml").is_file() else None


def checkout_models_dir() -> Path | None:
    root = checkout_root()
    return root / "models" if root else None


def model_search_dirs() -> list[Path]:
    dirs = [models_dir()]
    checkout = checkout_models_dir()
    if checkout is not None:
        dirs.append(checkout)
    return dirs
